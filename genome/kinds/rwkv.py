"""Gene kind `rwkv` (T): RWKV-4 time mixing, decoded by `phenotype.blocks.rwkv.RWKVTimeMixConfig`."""

from __future__ import annotations

from dogma_evolve.genome.schema import KindSpec, register_kind

SPEC = register_kind(KindSpec("rwkv", ("T",), {}, doc="RWKV-4 time mixing (token shift + WKV)"))
