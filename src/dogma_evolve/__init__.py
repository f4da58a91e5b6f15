"""DOGMA evolve: evolutionary architecture search over typed DOGMA genomes.

The project's six packages import under this one name, which no other distribution uses:

    dogma_evolve.genome      typed genomes (bases, regions, the regulatory graph)
    dogma_evolve.kernels     the sequence-mixing ops: references, Triton, CPU paths
    dogma_evolve.store       the SQL store (SQLAlchemy, Alembic migrations)
    dogma_evolve.phenotype   genomes decoded into PyTorch models
    dogma_evolve.evaluation  tasks, training, the Ray pool
    dogma_evolve.evolution   the search, its commands (`evolve`) and the Python API

The repository keeps them as top-level folders (`genome/`, ...); `src/dogma_evolve/` links
them under this package, so that nothing of ours is importable as a bare `kernels` or `store`
(Hugging Face's `kernels`, which transformers needs, shadowed ours before). The Python API is
re-exported here, imported on first use (PEP 562):

    from dogma_evolve import create_search, load_search
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "create_search": "dogma_evolve.evolution.study",
    "load_search": "dogma_evolve.evolution.study",
    "Search": "dogma_evolve.evolution.study",
    "Individual": "dogma_evolve.evolution.study",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dogma_evolve' has no attribute {name!r}")
