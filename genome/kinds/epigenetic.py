"""Gene kind `epigenetic` (A): epigenetic memory, decoded by
`phenotype.blocks.memory.EpigeneticConfig`."""

from __future__ import annotations

from dogma_evolve.genome.schema import KindSpec, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "epigenetic",
        ("A",),
        {"slots": integer(16, 1, 4096, "marks per token, carried across blocks and chunks")},
        doc="epigenetic memory: gated marks handed from block to block and carried in time",
    )
)
