"""A reader process for `test_readers.py`: it polls a store through the `evolve` commands
that only read, one call every half second, until a stop file appears, and writes one JSON
line per call (the command, its exit code, the first line of its stderr or of a crash, the
CPU seconds it took).

``python -m tests.store.readers URL LOG STOP FOLDER [--light]``: each call runs the command's
handler in this process (`evolution.cli.main.main`), so a call costs what the command costs,
not an interpreter's start. Until ``evolve runs --json`` lists a run the calls are only
``waiting`` (no store yet is a legitimate answer); from then on every call is ``polling``
and is judged by the test. The commands that name an individual (#1, the first birth) join
once the run has committed generation 0. After the stop file, one last round. ``--light``:
`runs` only.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from dogma_evolve.evolution.cli.main import main

POLL_S = 0.5


def cycle(folder: Path, light: bool, committed: bool) -> list[list[str]]:
    """The commands of one round, in order."""
    commands = [["runs", "--json"]]
    if light:  # no torch: a second reader at the cost of its queries alone
        return commands
    if committed:  # first in the round: they can only start once generation 0 is stored
        commands += [["audit", "1", "--json"], ["lineage", "1"], ["blame", "1"], ["diff", "1", "2"]]
    html = ["report", "--html", str(folder / "report.html")]
    return commands + [["report", "--json"], ["report"], html, ["check", "--json"]]


def call(argv: list[str], url: str) -> tuple[Any, str, str]:
    """(exit code or "crash", stdout, the first line of stderr or of the traceback)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code: Any = main([*argv, "--store", url])
    except BaseException:  # noqa: BLE001 - a crash is what the test looks for
        return "crash", out.getvalue(), traceback.format_exc().strip().splitlines()[-1]
    lines = err.getvalue().strip().splitlines()
    return code, out.getvalue(), lines[0] if lines else ""


def poll(url: str, log: Path, stop: Path, folder: Path, light: bool) -> None:
    """Call the commands round after round until ``stop`` exists, then one last whole
    round, so every command answers the finished run too (see the module doc)."""
    phase, status, committed = "waiting", None, False
    with log.open("w") as sink:
        while True:
            last = stop.exists()
            for argv in cycle(folder, light, committed):
                started = time.process_time()
                code, out, first = call(argv, url)
                cpu = round(time.process_time() - started, 3)
                if argv[0] == "runs" and code == 0 and (runs := json.loads(out)):
                    phase, status = "polling", runs[0]["status"]
                    committed = runs[0]["generations"] >= 1
                record = {"argv": argv, "code": code, "error": first, "phase": phase, "run": status}
                sink.write(json.dumps({**record, "cpu": cpu}) + "\n")
                sink.flush()
                time.sleep(POLL_S)
            if last:
                return


if __name__ == "__main__":
    url, log, stop, folder = sys.argv[1:5]
    poll(url, Path(log), Path(stop), Path(folder), light="--light" in sys.argv[5:])
