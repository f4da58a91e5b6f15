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
        return cfg.build()


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
