"""`evolve ARGV` in the test's own process: the command line without a subprocess's start-up."""

from __future__ import annotations

import contextlib
import io

from dogma_evolve.evolution.cli.main import main


def evolve_in_process(*argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `evolve ARGV` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()
