"""Gene kind `gru` (T): the GRU recurrence, decoded by `dogma_evolve.phenotype.blocks.recurrent.GRUConfig`."""

from __future__ import annotations

from dogma_evolve.genome.kinds import lstm
from dogma_evolve.genome.schema import MAX_WIDTH, KindSpec, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "gru",
        ("T",),
        {"hidden": integer(0, 0, MAX_WIDTH, "0 = d_model")},
        doc="GRU recurrence (fused kernels) with an output projection",
        derive=lstm.derive,
    )
)
