"""Gene kind `conv` (T): causal short depthwise convolution, decoded by
`phenotype.blocks.conv.ConvConfig`."""

from __future__ import annotations

from dogma_evolve.genome.schema import KindSpec, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "conv",
        ("T",),
        {"kernel": integer(4, 1, 1024, "filter length (causal, depthwise)")},
        doc="causal short depthwise convolution",
    )
)
