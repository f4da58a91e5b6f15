"""Gene kind `lstm` (T): the LSTM recurrence, decoded by `phenotype.blocks.recurrent.LSTMConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.schema import MAX_WIDTH, KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """hidden 0 = d_model (gru shares this rule)."""
    p["hidden"] = p["hidden"] or s["d_model"]
    return p


SPEC = register_kind(
    KindSpec(
        "lstm",
        ("T",),
        {"hidden": integer(0, 0, MAX_WIDTH, "0 = d_model")},
        doc="LSTM recurrence (fused kernels) with an output projection",
        derive=derive,
    )
)
