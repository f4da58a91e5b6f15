"""Well-known architectures written as genomes (public configurations).

Presets seed populations and anchor the accounting: `phenotype.account` must reproduce
the published parameter counts of these models exactly (tests/test_presets.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from genome.core import Genome
from genome.errors import GenomeError


def _doc(structural: dict[str, Any], layers: int, bases: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "regions": [
            {"id": "s0", "type": "structural", "settings": structural},
            {"id": "p1", "type": "promoter", "settings": {"copies": layers}},
            {"id": "c1", "type": "coding", "bases": bases},
        ],
    }


def gpt2_small() -> dict[str, Any]:
    """GPT-2 small (Radford et al., 2019): 124,439,808 parameters with tied embeddings."""
    return _doc(
        {"d_model": 768, "vocab": 50257, "max_len": 1024, "positions": "learned",
         "norm": "layernorm", "norm_position": "pre", "norm_eps": 1e-5, "bias": True,
         "tie_embeddings": True},
        12,
        [{"base": "T", "kind": "attention", "params": {"heads": 12}},
         {"base": "A", "kind": "mlp", "params": {"hidden": 3072, "activation": "gelu"}}],
    )


def llama3_8b() -> dict[str, Any]:
    """Llama 3 8B (Meta, 2024): 8,030,261,248 parameters, untied head."""
    return _doc(
        {"d_model": 4096, "vocab": 128256, "max_len": 8192, "positions": "rope",
         "rope_theta": 500000.0, "norm": "rmsnorm", "norm_position": "pre", "norm_eps": 1e-5,
         "bias": False, "tie_embeddings": False},
        32,
        [{"base": "T", "kind": "attention", "params": {"heads": 32, "kv_heads": 8, "head_dim": 128}},
         {"base": "A", "kind": "swiglu", "params": {"hidden": 14336}}],
    )


def mamba_130m() -> dict[str, Any]:
    """Mamba-130m (Gu & Dao, 2023): 24 Mamba layers, width 768, vocabulary 50277 padded to 50280."""
    return _doc(
        {"d_model": 768, "vocab": 50280, "max_len": 2048, "positions": "none",
         "norm": "rmsnorm", "norm_position": "pre", "norm_eps": 1e-5, "bias": False,
         "tie_embeddings": True},
        24,
        [{"base": "T", "kind": "mamba",
          "params": {"d_state": 16, "expand": 2, "d_conv": 4, "dt_rank": 48}}],
    )


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    "gpt2-small": gpt2_small,
    "llama3-8b": llama3_8b,
    "mamba-130m": mamba_130m,
}


def preset(name: str) -> Genome:
    """The named preset as a validated genome."""
    if name not in PRESETS:
        raise GenomeError(f"unknown preset {name!r:.40} (known: {', '.join(sorted(PRESETS))})")
    return Genome.from_dict(PRESETS[name]())


def load_genome(source: str) -> Genome:
    """`preset:NAME` or a path to a YAML genome file."""
    if source.startswith("preset:"):
        return preset(source.removeprefix("preset:"))
    try:
        with open(source, "rb") as f:
            data = f.read(2 << 20)
    except OSError as e:
        raise GenomeError(f"cannot read {source}: {e.strerror}") from None
    return Genome.from_yaml(data)
