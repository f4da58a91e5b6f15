"""Build-on-first-use of the C++ CPU kernels through ``torch.utils.cpp_extension.load``.

The compiled module is cached in torch's extensions directory (``TORCH_EXTENSIONS_DIR`` or
``~/.cache/torch_extensions``). When no compiler (or ninja) is present the build fails once,
a warning says so, and callers fall back to the PyTorch reference.
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from pathlib import Path
from types import ModuleType

import torch


def _cpu_flags() -> tuple[str, list[str]]:
    """Name suffix and compiler flags for the instruction set torch itself dispatches to.

    The suffix keeps builds for different instruction sets apart in a shared cache.
    """
    capability = torch.backends.cpu.get_cpu_capability()
    # -ffast-math lets GCC vectorise exp over the state dimension (glibc libmvec) and
    # reassociate the reductions over it; every loop here is finite-valued by construction.
    flags = ["-O3", "-ffast-math", "-fopenmp"]
    if capability in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma"]
    return capability.lower(), flags


@functools.cache
def load_cpu_extension(name: str, source: Path) -> ModuleType | None:
    """Compile ``source`` into module ``name`` once per process; ``None`` if that fails."""
    suffix, flags = _cpu_flags()
    try:
        from torch.utils.cpp_extension import load

        # The build is keyed by the source's location too: two checkouts sharing one cache
        # would otherwise overwrite each other's build on every load (a 30 s rebuild each).
        where = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:8]
        return load(
            name=f"dogma_{name}_{suffix}_{where}",
            sources=[str(source)],
            extra_cflags=flags,
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as error:  # compiler, ninja or headers missing: degrade, never crash
        warnings.warn(
            f"kernels: could not build the C++ CPU kernel {name!r} ({error}); "
            "falling back to the PyTorch reference.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
