"""Gene kind `strand_attention` (T): attention with a learned hybridisation energy, decoded by
`phenotype.blocks.strand.StrandAttentionConfig`."""

from __future__ import annotations

from dogma_evolve.genome.kinds import attention
from dogma_evolve.genome.schema import KindSpec, flag, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "strand_attention",
        ("T",),
        {
            "heads": integer(4, 1, 1024),
            "kv_heads": integer(0, 0, 1024, "0 = heads"),
            "head_dim": integer(0, 0, 1024, "0 = d_model / heads"),
            "window": integer(0, 0, 1 << 24, "0 = full causal attention"),
            "qk_norm": flag(False),
            "scales": integer(4, 1, 16, "short-range stacking terms of the hybridisation energy"),
        },
        doc="attention with a learned per-head hybridisation energy of the strands' distance",
        derive=attention.derive,
    )
)
