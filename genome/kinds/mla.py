"""Gene kind `mla` (T): multi-head latent attention, decoded by
`phenotype.blocks.latent_attention.LatentAttentionConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.kinds._rules import heads_width
from dogma_evolve.genome.schema import MAX_WIDTH, KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim 0 = d_model / heads; v_head_dim 0 = head_dim; kv_rank 0 = 4 * head_dim;
    rope_dim even."""
    p = heads_width(p, s)
    p["v_head_dim"] = p["v_head_dim"] or p["head_dim"]
    p["kv_rank"] = p["kv_rank"] or 4 * p["head_dim"]
    if p["rope_dim"] % 2:
        raise ValueError(f"rope_dim must be even, got {p['rope_dim']}")
    return p


SPEC = register_kind(
    KindSpec(
        "mla",
        ("T",),
        {
            "heads": integer(4, 1, 1024),
            "head_dim": integer(0, 0, 1024, "per-head query/key width without position; 0 = d/heads"),
            "rope_dim": integer(8, 0, 1024, "decoupled RoPE width (even; 0 = no positions)"),
            "v_head_dim": integer(0, 0, 1024, "0 = head_dim"),
            "kv_rank": integer(0, 0, MAX_WIDTH, "the cached latent's width; 0 = 4 * head_dim"),
            "q_rank": integer(0, 0, MAX_WIDTH, "query compression rank; 0 = none"),
        },
        doc="multi-head latent attention (DeepSeek-V2): the KV cache is a low-rank latent",
        derive=derive,
    )
)
