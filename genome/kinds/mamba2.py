"""Gene kind `mamba2` (T): Mamba-2 (SSD), decoded by `dogma_evolve.phenotype.blocks.ssm.Mamba2Config`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.schema import KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim 0 = 64 where it divides expand * d_model, else one head of that width."""
    inner = p["expand"] * s["d_model"]
    p["head_dim"] = p["head_dim"] or (64 if inner % 64 == 0 else inner)
    if inner % p["head_dim"]:
        raise ValueError(f"head_dim={p['head_dim']} does not divide expand*d_model={inner}")
    return p


SPEC = register_kind(
    KindSpec(
        "mamba2",
        ("T",),
        {
            "d_state": integer(16, 1, 1024),
            "expand": integer(2, 1, 16),
            "head_dim": integer(0, 0, 4096, "0 = 64 where it divides expand*d_model, else one head"),
            "d_conv": integer(4, 1, 64),
        },
        doc="Mamba-2 (SSD): scalar decay per head, chunked scan in training",
        derive=derive,
    )
)
