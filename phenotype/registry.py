"""The block registry as data: gene kind -> config class (module, schema, cost model).

The hyperparameter schema and the allowed base types of each kind live in
`genome.schema.KINDS` (validation needs them without the phenotype); the config class
here builds the module (`build()`) and carries the cost model (`num_params`,
`flops_per_token`, `state_per_token`, `state_fixed`). Both tables name the same kinds.
"""

from __future__ import annotations

from dataclasses import dataclass

from genome.schema import KINDS, KindSpec
from phenotype.blocks.attention import AttentionConfig
from phenotype.blocks.base import BlockConfig
from phenotype.blocks.conv import ConvConfig
from phenotype.blocks.dna import DNAConfig
from phenotype.blocks.expression import ExpressionConfig
from phenotype.blocks.latent_attention import LatentAttentionConfig
from phenotype.blocks.linear_attention import LinearAttentionConfig, RetentionConfig
from phenotype.blocks.memory import EpigeneticConfig, TetraConfig
from phenotype.blocks.mlp import GeGLUConfig, MLPConfig, SwiGLUConfig
from phenotype.blocks.moe import MoEConfig
from phenotype.blocks.recurrent import GRUConfig, LSTMConfig
from phenotype.blocks.regulation import AllostericConfig, GateConfig
from phenotype.blocks.rglru import RGLRUConfig
from phenotype.blocks.rwkv import RWKVChannelMixConfig, RWKVTimeMixConfig
from phenotype.blocks.s4 import S4Config
from phenotype.blocks.ssm import Mamba2Config, MambaConfig
from phenotype.blocks.strand import StrandAttentionConfig


@dataclass(frozen=True)
class BlockSpec:
    kind: str
    config: type[BlockConfig]
    role: str  # "sequence" (token mixer), "channel" (per-token) or "regulatory"

    @property
    def schema(self) -> KindSpec:
        return KINDS[self.kind]


REGISTRY: dict[str, BlockSpec] = {
    spec.kind: spec
    for spec in (
        BlockSpec("attention", AttentionConfig, "sequence"),
        BlockSpec("mla", LatentAttentionConfig, "sequence"),
        BlockSpec("conv", ConvConfig, "sequence"),
        BlockSpec("mamba", MambaConfig, "sequence"),
        BlockSpec("s4", S4Config, "sequence"),
        BlockSpec("lstm", LSTMConfig, "sequence"),
        BlockSpec("gru", GRUConfig, "sequence"),
        BlockSpec("mamba2", Mamba2Config, "sequence"),
        BlockSpec("rglru", RGLRUConfig, "sequence"),
        BlockSpec("linear_attention", LinearAttentionConfig, "sequence"),
        BlockSpec("retention", RetentionConfig, "sequence"),
        BlockSpec("rwkv", RWKVTimeMixConfig, "sequence"),
        BlockSpec("rwkv_channel", RWKVChannelMixConfig, "channel"),
        BlockSpec("dna", DNAConfig, "sequence"),
        BlockSpec("strand_attention", StrandAttentionConfig, "sequence"),
        BlockSpec("expression", ExpressionConfig, "channel"),
        BlockSpec("epigenetic", EpigeneticConfig, "sequence"),
        BlockSpec("tetra", TetraConfig, "sequence"),
        BlockSpec("mlp", MLPConfig, "channel"),
        BlockSpec("swiglu", SwiGLUConfig, "channel"),
        BlockSpec("geglu", GeGLUConfig, "channel"),
        BlockSpec("moe", MoEConfig, "channel"),
        BlockSpec("gate", GateConfig, "regulatory"),
        BlockSpec("allosteric", AllostericConfig, "regulatory"),
    )
}
