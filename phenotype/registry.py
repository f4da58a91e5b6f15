"""The block registry as data: gene kind -> config class (module, schema, cost model).

The hyperparameter schema and the allowed base types of each kind live in
`genome.schema.KINDS` (validation needs them without the phenotype); the config class
here builds the module (`build()`) and carries the cost model (`num_params`,
`flops_per_token`, `state_per_token`, `state_fixed`). Both tables name the same kinds.
"""

from __future__ import annotations

from dataclasses import dataclass

from genome.schema import KINDS, KindSchema
from phenotype.blocks.attention import AttentionConfig
from phenotype.blocks.base import BlockConfig
from phenotype.blocks.mlp import MLPConfig, SwiGLUConfig
from phenotype.blocks.regulation import GateConfig
from phenotype.blocks.ssm import MambaConfig


@dataclass(frozen=True)
class BlockSpec:
    kind: str
    config: type[BlockConfig]
    role: str            # "sequence" (token mixer), "channel" (per-token) or "regulatory"

    @property
    def schema(self) -> KindSchema:
        return KINDS[self.kind]


REGISTRY: dict[str, BlockSpec] = {
    spec.kind: spec
    for spec in (
        BlockSpec("attention", AttentionConfig, "sequence"),
        BlockSpec("mamba", MambaConfig, "sequence"),
        BlockSpec("mlp", MLPConfig, "channel"),
        BlockSpec("swiglu", SwiGLUConfig, "channel"),
        BlockSpec("gate", GateConfig, "regulatory"),
    )
}
