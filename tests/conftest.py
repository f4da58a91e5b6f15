"""Test-session settings that must hold before anything imports triton or starts Ray."""

from __future__ import annotations

import importlib.abc
import os
import shutil
import sys
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

# Triton kernels run on CPU only in interpreter mode, and the variable is read when triton
# is imported: set it here, before any test module imports kernels. A GPU keeps real kernels.
if not (shutil.which("nvidia-smi") or os.environ.get("CUDA_VISIBLE_DEVICES")):
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# One intra-op thread: the suite runs models far too small to gain from two, and OpenMP
# threads spinning against Ray workers and subprocesses on 2 cores cost 10x (measured).
os.environ.setdefault("OMP_NUM_THREADS", "1")


class _NoBareFolders(importlib.abc.MetaPathFinder):
    """Under pytest the repository root is on `sys.path` (tests/ is a package), where the
    design card's folders would answer to bare names (`kernels`, `store`) as they never do in a
    user's process: there our packages are `dogma_evolve.*` only, and a bare `kernels` is
    Hugging Face's (transformers imports it). This finder gives such a name the module that the
    environment has outside the repository, or none."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name not in _FOLDERS:
            return None
        elsewhere = [p for p in sys.path if Path(p or ".").resolve() != _ROOT]
        spec = PathFinder.find_spec(name, elsewhere)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


_ROOT = Path(__file__).resolve().parents[1]
_FOLDERS = ("genome", "phenotype", "kernels", "evolution", "evaluation", "store")
sys.meta_path.insert(0, _NoBareFolders())
