"""Gene kind `mamba` (T): the Mamba selective SSM, decoded by
`phenotype.blocks.ssm.MambaConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.schema import MAX_WIDTH, KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """dt_rank 0 = ceil(d_model / 16), as `mamba_simple.Mamba`."""
    p["dt_rank"] = p["dt_rank"] or -(-s["d_model"] // 16)
    return p


SPEC = register_kind(
    KindSpec(
        "mamba",
        ("T",),
        {
            "d_state": integer(16, 1, 1024),
            "expand": integer(2, 1, 16),
            "d_conv": integer(4, 1, 64),
            "dt_rank": integer(0, 0, MAX_WIDTH, "0 = ceil(d_model / 16)"),
        },
        doc="Mamba selective state-space mixer (Gu & Dao, 2023)",
        derive=derive,
    )
)
