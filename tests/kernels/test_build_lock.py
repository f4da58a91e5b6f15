"""A builder killed mid-build leaves torch's ``lock`` file behind; the next build must not
wait on it forever (`kernels._build._sole_builder`)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dogma_evolve.kernels import _build

TINY = """
#include <pybind11/pybind11.h>
int answer() { return 42; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("answer", &answer); }
"""


def test_a_lock_left_by_a_dead_builder_is_removed(tmp_path: Path) -> None:
    build = tmp_path / "dogma_x"
    build.mkdir()
    (build / "lock").touch()
    with _build._sole_builder(build):
        assert not (build / "lock").exists()
    assert (tmp_path / "dogma_x.flock").exists()


def test_a_live_builder_keeps_the_others_out(tmp_path: Path) -> None:
    build = tmp_path / "dogma_x"
    build.mkdir()
    with _build._sole_builder(build), open(tmp_path / "dogma_x.flock", "a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            raise AssertionError("a second builder took the flock a live one holds")
        except BlockingIOError:
            pass
    with open(tmp_path / "dogma_x.flock", "a") as other:  # released once the holder leaves
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.slow  # compiles a (tiny) extension in a fresh interpreter
def test_a_build_after_a_killed_one_completes(tmp_path: Path) -> None:
    """The stale ``lock`` a killed build leaves (placed here by hand in the build directory)
    does not stop a new process from building and loading the extension."""
    source = tmp_path / "tiny.cpp"
    source.write_text(TINY)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from torch.utils.cpp_extension import _get_build_directory
        from dogma_evolve.kernels import _build
        text = Path({str(source)!r}).read_text()
        build = Path(_get_build_directory(_build.module_name("tiny", text), verbose=False))
        (build / "lock").touch()  # what a builder killed mid-build leaves
        module = _build.load_cpu_extension("tiny", Path({str(source)!r}))
        sys.exit(0 if module is not None and module.answer() == 42 else 1)
        """
    )
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")}
    # the timeout only turns a hang (the bug) into a failure; nothing here measures time
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, timeout=600, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
