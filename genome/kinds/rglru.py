"""Gene kind `rglru` (T): the Hawk/Griffin recurrent block, decoded by
`phenotype.blocks.rglru.RGLRUConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.schema import MAX_WIDTH, KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """width 0 = d_model; heads divide the width."""
    p["width"] = p["width"] or s["d_model"]
    if p["width"] % p["heads"]:
        raise ValueError(f"heads={p['heads']} does not divide width={p['width']}")
    return p


SPEC = register_kind(
    KindSpec(
        "rglru",
        ("T",),
        {
            "width": integer(0, 0, MAX_WIDTH, "recurrence width; 0 = d_model"),
            "heads": integer(4, 1, 1024, "blocks of the block-diagonal gates (divides width)"),
            "d_conv": integer(4, 1, 64),
        },
        doc="Hawk/Griffin recurrent block with the real-gated linear recurrent unit",
        derive=derive,
    )
)
