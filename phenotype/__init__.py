"""Phenotypes: genomes decoded into PyTorch models, with exact analytic accounting.

decode(genome) -> DogmaModel        token ids (B, T) int64 -> logits (B, T, V)
account(genome, seq_len) -> Accounting
"""

from __future__ import annotations

import torch

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype.accounting import Accounting, account
from dogma_evolve.phenotype.config import ModelConfig, model_config
from dogma_evolve.phenotype.model import DogmaModel
from dogma_evolve.phenotype.registry import REGISTRY, BlockSpec


def decode(genome: Genome, device: str | torch.device | None = None) -> DogmaModel:
    """Build the phenotype of a valid genome (on `device`; "meta" allocates nothing)."""
    cfg = model_config(genome)
    if device is None:
        return cfg.build()
    with torch.device(device):
        model = cfg.build()
    # A library can blind torch's device context to a factory function for the whole process
    # (transformers' meta loading swaps torch.linspace while the context first lists them, an
    # lru_cache): what such a call built on the CPU is placed here, any block kind's alike.
    return model.to(device)


__all__ = [
    "REGISTRY",
    "Accounting",
    "BlockSpec",
    "DogmaModel",
    "ModelConfig",
    "account",
    "decode",
    "model_config",
]
