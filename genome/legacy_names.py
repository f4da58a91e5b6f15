"""The project's old import names for a user's code written before the namespace.

Until 0.1's namespace change the six packages imported as top-level `genome`, `phenotype`,
`kernels`, `evolution`, `evaluation` and `store`; a user's plugin or task module of that time
says `from genome import KindSpec, register_kind`. Those names collided with other
distributions (Hugging Face's `kernels`, which transformers needs), so the project now lives
under `dogma_evolve` alone. For the user's old code to keep loading (a stored run's plugin is
pinned to its file's bytes, so it cannot be edited), :func:`install` puts an alias finder in
front of the import system: an old name `genome.core` is the module `dogma_evolve.genome.core`
itself (one object under two names, so classes and registries are shared), with a
`DeprecationWarning` naming the new import.

A top-level old name that another installed distribution provides (Hugging Face's `kernels`)
is never aliased: that distribution's module is what `import kernels` means. The project's own
code never imports an old name (tests/test_layers.py checks it); only a user's code, loaded
through `genome.plugins`, installs the finder.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

import dogma_evolve

NAMESPACE = "dogma_evolve"
OLD_NAMES = ("genome", "phenotype", "kernels", "evolution", "evaluation", "store")


class _Alias(importlib.abc.Loader):
    """Loads an old name as the already-imported new module (no second copy)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


class LegacyNames(importlib.abc.MetaPathFinder):
    """`genome.x` -> `dogma_evolve.genome.x` for the names no other distribution provides."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.split(".")[0]
        if top not in OLD_NAMES:
            return None
        if fullname == top:
            elsewhere = dogma_evolve.path_without_source_root()
            if importlib.machinery.PathFinder.find_spec(top, elsewhere) is not None:
                return None  # another distribution's (or the user's own) module of that name
        else:
            parent = sys.modules.get(fullname.rpartition(".")[0])
            if parent is None or not getattr(parent, "__name__", "").startswith(NAMESPACE + "."):
                return None  # a submodule of someone else's package
        new = f"{NAMESPACE}.{fullname}"
        try:
            found = importlib.util.find_spec(new)
        except ModuleNotFoundError:
            return None
        if found is None:
            return None
        warnings.warn(
            f"`{fullname}` is dogma-evolve's old import name: import `{new}` instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.machinery.ModuleSpec(
            fullname, _Alias(new), is_package=found.submodule_search_locations is not None
        )


def install() -> None:
    """Put the alias finder first in `sys.meta_path` (once per process)."""
    if not any(isinstance(finder, LegacyNames) for finder in sys.meta_path):
        sys.meta_path.insert(0, LegacyNames())
