"""Gene kind `attention` (T): causal softmax attention, decoded by
`phenotype.blocks.attention.AttentionConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.kinds._rules import heads_width
from dogma_evolve.genome.schema import KindSpec, flag, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim 0 = d_model / heads; kv_heads 0 = heads (MHA); RoPE needs an even head_dim;
    local:global interleaving needs a window. Strand attention shares this rule."""
    p = heads_width(p, s)
    p["kv_heads"] = p["kv_heads"] or p["heads"]
    if p["heads"] % p["kv_heads"]:
        raise ValueError(f"kv_heads={p['kv_heads']} does not divide heads={p['heads']}")
    if s["positions"] == "rope" and p["head_dim"] % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {p['head_dim']}")
    if p.get("global_every") and not p["window"]:
        raise ValueError("global_every interleaves local and global layers: it needs a window")
    return p


SPEC = register_kind(
    KindSpec(
        "attention",
        ("T",),
        {
            "heads": integer(4, 1, 1024, "query heads"),
            "kv_heads": integer(0, 0, 1024, "key-value heads; 0 = heads (MHA), 1 = MQA, else GQA"),
            "head_dim": integer(0, 0, 1024, "0 = d_model / heads"),
            "window": integer(0, 0, 1 << 24, "sliding-window length; 0 = full causal attention"),
            "qk_norm": flag(False, "RMS-normalise queries and keys per head"),
            "global_every": integer(
                0,
                0,
                1024,
                "local:global interleave: with a window, copy c of "
                "the region attends globally when (c+1) % global_every == 0",
            ),
        },
        doc="causal softmax attention (MHA, GQA, MQA, sliding window, local:global) via SDPA",
        derive=derive,
    )
)
