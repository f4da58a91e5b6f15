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
re-exported here, imported on first use (PEP 562); `NotOurFolders` keeps the bare names off
the checkout's folders when a process runs with the repository on its path:

    from dogma_evolve import create_search, load_search
"""

import sys
from importlib import import_module
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

#: the packages' names inside the namespace, once top-level names of their own
PACKAGES = ("genome", "phenotype", "kernels", "evolution", "evaluation", "store")
#: the folder holding the six package folders: the repository in a checkout (where the folders
#: are the design card's top-level ones), this package's own folder in a wheel
SOURCE_ROOT = (Path(__file__).parent / "genome").resolve().parent


class NotOurFolders(MetaPathFinder):
    """A bare `kernels`, `store`, ... never resolves to the checkout's own folders.

    In a checkout the package folders sit at the repository's top, so a process whose
    `sys.path` holds the repository (`python -m ...` or a notebook started there, pytest)
    would find them under their bare names: transformers' `import kernels` would get ours,
    not Hugging Face's. For those six names this finder looks on `sys.path` without the
    repository: another distribution's module is found as in any other folder; ours is
    not found at all."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name not in PACKAGES:
            return None
        elsewhere = path_without_source_root()
        if len(elsewhere) == len(sys.path):
            return None  # the checkout is not on the path: nothing to hide
        spec = PathFinder.find_spec(name, elsewhere)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


def path_without_source_root() -> list[str]:
    """`sys.path` without the checkout's root (where the six folders answer to bare names)."""
    return [entry for entry in sys.path if not _is_source_root(entry)]


def _is_source_root(entry: str) -> bool:
    try:
        return Path(entry or ".").resolve() == SOURCE_ROOT
    except OSError:
        return False


if not any(isinstance(finder, NotOurFolders) for finder in sys.meta_path):
    sys.meta_path.insert(0, NotOurFolders())

_PUBLIC = {
    "create_search": "dogma_evolve.evolution.study",
    "load_search": "dogma_evolve.evolution.study",
    "Search": "dogma_evolve.evolution.study",
    "Individual": "dogma_evolve.evolution.study",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'dogma_evolve' has no attribute {name!r}")
