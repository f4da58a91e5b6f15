"""Gene kind `rwkv_channel` (A): RWKV-4 channel mixing, decoded by
`phenotype.blocks.rwkv.RWKVChannelMixConfig`."""

from __future__ import annotations

from dogma_evolve.genome.kinds import mlp
from dogma_evolve.genome.schema import MAX_HIDDEN, KindSpec, integer, register_kind

SPEC = register_kind(
    KindSpec(
        "rwkv_channel",
        ("A",),
        {"hidden": integer(0, 0, MAX_HIDDEN, "0 = 4 * d_model")},
        doc="RWKV-4 channel mixing (token shift + squared-ReLU MLP with a receptance gate)",
        derive=mlp.derive,
    )
)
