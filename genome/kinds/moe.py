"""Gene kind `moe` (A): mixture of experts, decoded by `dogma_evolve.phenotype.blocks.moe.MoEConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.kinds._rules import four_times, llama_hidden
from dogma_evolve.genome.schema import MAX_HIDDEN, KindSpec, choice, integer, real, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """top_k at most experts; hidden 0 = the expert's own rule (4 * d_model for gelu/relu
    MLPs, the LLaMA rule for swiglu/geglu)."""
    if p["top_k"] > p["experts"]:
        raise ValueError(f"top_k={p['top_k']} exceeds experts={p['experts']}")
    if not p["hidden"]:
        rule = four_times if p["expert"] in ("gelu", "relu") else llama_hidden
        p["hidden"] = rule(s["d_model"])
    return p


SPEC = register_kind(
    KindSpec(
        "moe",
        ("A",),
        {
            "experts": integer(8, 1, 1024),
            "top_k": integer(2, 1, 64, "experts per token (at most experts)"),
            "hidden": integer(0, 0, MAX_HIDDEN, "per expert; 0 = the expert's own default rule"),
            "expert": choice("swiglu", "swiglu", "geglu", "gelu", "relu"),
            "shared": integer(0, 0, 64, "always-on shared experts (DeepSeekMoE), fused into one"),
            "aux_weight": real(0.01, 0.0, 10.0, "weight of the Switch load-balancing loss"),
        },
        doc="mixture of experts with top-k routing and a load-balancing loss",
        derive=derive,
    )
)
