"""Gene kind `linear_attention` (T): causal linear attention, decoded by
`phenotype.blocks.linear_attention.LinearAttentionConfig`."""

from __future__ import annotations

from dogma_evolve.genome.kinds._rules import heads_width
from dogma_evolve.genome.schema import KindSpec, choice, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "linear_attention",
        ("T",),
        {
            "heads": integer(4, 1, 1024),
            "head_dim": integer(0, 0, 1024, "0 = d_model / heads"),
            "feature": choice("elu", "elu", "relu", doc="feature map: elu(x)+1 or relu(x)"),
        },
        doc="causal linear attention with a kernel feature map (Katharopoulos et al., 2020)",
        derive=heads_width,
    )
)
