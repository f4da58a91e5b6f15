"""Gene kind `mlp` (A): the two-layer MLP, decoded by `dogma_evolve.phenotype.blocks.mlp.MLPConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.kinds._rules import four_times
from dogma_evolve.genome.schema import MAX_HIDDEN, KindSpec, choice, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """hidden 0 = 4 * d_model."""
    p["hidden"] = p["hidden"] or four_times(s["d_model"])
    return p


SPEC = register_kind(
    KindSpec(
        "mlp",
        ("A",),
        {
            "hidden": integer(0, 0, MAX_HIDDEN, "0 = 4 * d_model"),
            "activation": choice("gelu", "gelu", "relu"),
        },
        doc="two-layer MLP channel mixer",
        derive=derive,
    )
)
