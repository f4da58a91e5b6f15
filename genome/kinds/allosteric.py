"""Gene kind `allosteric` (C, regulatory regions): allosteric regulation, decoded by
`phenotype.blocks.regulation.AllostericConfig`."""

from __future__ import annotations

from dogma_evolve.genome.schema import KindSpec, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "allosteric",
        ("C",),
        {
            "k": integer(2, 1, 64, "targets each source region sends its summary to"),
            "width": integer(16, 1, 4096, "width of the summaries and receptors"),
        },
        regions=("regulatory",),
        doc="allosteric regulation: sparse top-k communication from earlier to later regions",
    )
)
