"""The block registry: gene kind -> `BlockSpec` (config class, role), as data.

Each block module registers its config class at import (`class FooConfig(BlockConfig,
kind="foo", role=...)`, `phenotype.blocks.base`); importing `phenotype.blocks` imports
them all. The kind's gene (params, defaults, derivations, base types, regions) is its
`KindSpec` in `genome.kinds`, which `BlockSpec.schema` returns.
"""

from __future__ import annotations

import dogma_evolve.phenotype.blocks  # noqa: F401  (imports every block module, registering it)
from dogma_evolve.phenotype.blocks.base import REGISTRY, BlockSpec

__all__ = ["REGISTRY", "BlockSpec"]
