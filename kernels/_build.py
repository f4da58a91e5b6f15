"""Build-on-first-use of the C++ CPU kernels through ``torch.utils.cpp_extension.load``.

The compiled module is cached in torch's extensions directory (``TORCH_EXTENSIONS_DIR`` or
``~/.cache/torch_extensions``), named by a hash of the source's text, the compiler flags and
torch's include paths (``module_name``): two checkouts on one torch installation, or a
checkout and a model exported from it (whose copy of this module carries the source as text,
``EMBEDDED``), share one build; another environment builds its own. When no compiler (or ninja) is present
the build fails once, a warning says so, and callers fall back to the PyTorch reference.

torch guards a build with a ``lock`` file in the build directory and makes every later load
wait until that file is gone; a builder killed mid-build (a worker a fault test kills, a
Ctrl-C) leaves it behind, and every later load in any process then waits forever. So each
build here runs under an advisory ``flock`` on ``<build dir>.flock`` (the kernel drops it when
its holder dies): a ``lock`` file found while holding it was left by a dead builder and is
removed. Builders of another copy of this module without the guard (an export written before
it) are not covered.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

# C++ source file name -> its text. Empty in DOGMA's own kernels, which read their `.cpp`
# files; `evolve export` writes the texts into an exported model's copy of this module
# (`phenotype.standalone.writer`), since a Hugging Face directory carries Python modules only:
# transformers copies a remote-code model's `.py` files into its cache, nothing else.
EMBEDDED: dict[str, str] = {}


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


def source_text(source: Path) -> str:
    """The text of a kernel's C++ source: the embedded copy under its file name, else the file."""
    embedded = EMBEDDED.get(source.name)
    return embedded if embedded is not None else source.read_text()


def _written(name: str, text: str) -> Path:
    """``text`` as ``<extensions root>/dogma_sources/<name>.cpp``, written atomically and only
    when absent or different (a rewrite would make ninja rebuild; a reader never sees half)."""
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()) / "dogma_sources"
    path = root / f"{name}.cpp"
    if path.is_file() and path.read_text() == text:
        return path
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=root, suffix=".tmp", delete=False) as f:
        f.write(text)
    os.replace(f.name, path)
    return path


@functools.cache
def load_cpu_extension(name: str, source: Path) -> ModuleType | None:
    """Compile ``source`` (a ``.cpp`` file, or its ``EMBEDDED`` text) into module ``name``
    once per process; ``None`` if that fails."""
    try:
        text = source_text(source)
    except OSError as error:
        _failed(name, error)
        return None
    return _load(name, text)


def module_name(name: str, text: str) -> str:
    """The compiled module's (and its build folder's) name: ``dogma_<name>_<isa>_<key>``, the
    key a hash of the source, the compiler flags and torch's include paths. The include paths
    name the virtual environment torch lives in, and torch's build file names them too: two
    environments sharing one build folder would each rebuild it whenever the other had."""
    from torch.utils.cpp_extension import include_paths

    suffix, flags = _cpu_flags()
    key = hashlib.sha256("\0".join([text, *flags, *include_paths()]).encode()).hexdigest()[:12]
    return f"dogma_{name}_{suffix}_{key}"


@functools.cache
def _load(name: str, text: str) -> ModuleType | None:
    _, flags = _cpu_flags()
    module = module_name(name, text)
    try:
        from torch.utils.cpp_extension import _get_build_directory, load

        build_directory = Path(_get_build_directory(module, verbose=False))
        with _sole_builder(build_directory):
            return load(
                name=module,
                sources=[str(_written(module, text))],
                extra_cflags=flags,
                extra_ldflags=["-fopenmp"],
                build_directory=str(build_directory),
                verbose=False,
            )
    except Exception as error:  # compiler, ninja or headers missing: degrade, never crash
        _failed(name, error)
        return None


@contextlib.contextmanager
def _sole_builder(build_directory: Path) -> Iterator[None]:
    """Hold ``<build_directory>.flock`` exclusively, and remove torch's ``lock`` file in
    ``build_directory`` if one is there: every builder holds the flock while its ``lock``
    exists, so one found under it belongs to a builder that died (module docstring)."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system (an exported model on Windows): torch's lock alone
        yield
        return
    with open(build_directory.with_name(build_directory.name + ".flock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            (build_directory / "lock").unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _failed(name: str, error: BaseException) -> None:
    warnings.warn(
        f"kernels: could not build the C++ CPU kernel {name!r} ({error}); "
        "falling back to the PyTorch reference (the fast CPU path needs a C++ compiler and ninja).",
        RuntimeWarning,
        stacklevel=4,
    )
