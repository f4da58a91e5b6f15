"""Gene kind `retention` (T): RetNet multi-scale retention, decoded by
`phenotype.blocks.linear_attention.RetentionConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.kinds._rules import heads_width
from dogma_evolve.genome.schema import KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim 0 = d_model / heads (even: keys are rotated); v_head_dim 0 = head_dim."""
    p = heads_width(p, s)
    p["v_head_dim"] = p["v_head_dim"] or p["head_dim"]
    if p["head_dim"] % 2:
        raise ValueError(f"retention rotates keys: head_dim must be even, got {p['head_dim']}")
    return p


SPEC = register_kind(
    KindSpec(
        "retention",
        ("T",),
        {
            "heads": integer(4, 1, 1024),
            "head_dim": integer(0, 0, 1024, "key width per head (even); 0 = d_model / heads"),
            "v_head_dim": integer(0, 0, 2048, "value width per head; 0 = head_dim"),
        },
        doc="RetNet multi-scale retention (fixed per-head decays)",
        derive=derive,
    )
)
