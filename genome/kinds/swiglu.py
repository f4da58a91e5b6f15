"""Gene kind `swiglu` (A): the gated SiLU MLP, decoded by `dogma_evolve.phenotype.blocks.mlp.SwiGLUConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.kinds._rules import llama_hidden
from dogma_evolve.genome.schema import MAX_HIDDEN, KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """hidden 0 = the LLaMA rule (geglu shares it)."""
    p["hidden"] = p["hidden"] or llama_hidden(s["d_model"])
    return p


SPEC = register_kind(
    KindSpec(
        "swiglu",
        ("A",),
        {"hidden": integer(0, 0, MAX_HIDDEN, "0 = the LLaMA rule 2/3 * 4 * d_model, rounded to 8")},
        doc="gated SiLU MLP (Shazeer, 2020)",
        derive=derive,
    )
)
