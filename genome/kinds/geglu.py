"""Gene kind `geglu` (A): the gated GELU MLP, decoded by `dogma_evolve.phenotype.blocks.mlp.GeGLUConfig`."""

from __future__ import annotations

from dogma_evolve.genome.kinds import swiglu
from dogma_evolve.genome.schema import MAX_HIDDEN, KindSpec, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "geglu",
        ("A",),
        {"hidden": integer(0, 0, MAX_HIDDEN, "0 = the LLaMA rule 2/3 * 4 * d_model, rounded to 8")},
        doc="gated GELU MLP (Shazeer, 2020)",
        derive=swiglu.derive,
    )
)
