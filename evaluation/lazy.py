"""Packages that import their public names on first use (PEP 562), so that a torch-free
module of the package loads no torch: `install(__name__, public)` in the package's
``__init__`` returns its module ``__getattr__``.

``public`` maps each public name to the module that defines it. A submodule named like a
function the package makes public (``evaluation.evaluate``, ``evaluation.scaling.compare``) would,
once imported, replace that attribute of the package with the submodule (the import system
sets it); the package's class is swapped for one that keeps the function, as the eager
imports these packages once had did.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from types import ModuleType
from typing import Any


def install(package: str, public: Mapping[str, str]) -> Callable[[str], Any]:
    """Make ``package`` (already in ``sys.modules``) keep its public names; return the
    ``__getattr__`` that imports each on first use."""

    class _Package(ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            if not (name in public and isinstance(value, ModuleType)):
                super().__setattr__(name, value)

    sys.modules[package].__class__ = _Package

    def __getattr__(name: str) -> Any:
        if name in public:
            return getattr(import_module(public[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["install"]
