"""Gene kind `gate` (C, regulatory regions): the regulation gate, decoded by
`phenotype.blocks.regulation.GateConfig`."""

from __future__ import annotations

from dogma_evolve.genome.schema import KindSpec, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "gate",
        ("C",),
        {"hidden": integer(16, 1, 4096, "width of the regulatory signal")},
        regions=("regulatory",),
        doc="regulation gate: a per-token signal that activates or represses target regions",
    )
)
