"""Gene kind `expression` (G): the expression folder, decoded by
`phenotype.blocks.expression.ExpressionConfig`."""

from __future__ import annotations

from dogma_evolve.genome.kinds import mlp
from dogma_evolve.genome.schema import MAX_HIDDEN, KindSpec, choice, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "expression",
        ("G",),
        {
            "hidden": integer(0, 0, MAX_HIDDEN, "0 = 4 * d_model"),
            "activation": choice("gelu", "gelu", "silu"),
        },
        doc="expression folder: LayerNorm then an MLP that folds the representation",
        derive=mlp.derive,
    )
)
