"""`evolve calibrate` end to end on a tiny panel (two presets and two random genomes of the
DOGMA space on mqar, real in-process trainings of 5, 10 and 20 steps; one slow test on Ray):
a killed calibration resumes without retraining, `--json`, the printed table, the stored
transfer rows and the summary `evolve report` reads back, and one-line refusals; the
held-out loss of a member and the summary's loss rankings on hand-settled plans."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.evolution.calibrate.calibration import (
    KIND,
    Plan,
    loss_of,
    make_plan,
    stored_summary,
    summary,
)
from dogma_evolve.evolution.calibrate.table import calibration_lines
from dogma_evolve.evolution.cli import calibrate as calibrate_cli
from dogma_evolve.store import Store
from tests.evolution.stopping_pools import Pools
from tests.in_process import evolve_in_process as evolve

TINY = ["--task", "mqar", "--steps", "10", "--rungs", "5,10", "--target", "20"]
TINY += ["--presets", "2", "--random", "2", "--max-params", "100000"]
POINTS = 4 * 3  # members × fidelities (5, 10, 20)


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> Pools:
    fake = Pools()
    monkeypatch.setattr(calibrate_cli, "_pool", fake)
    return fake


def count(db: Path, table: str) -> int:
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db)) as c:
        return int(c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608


def test_a_calibration_resumes_without_retraining_and_reports_every_rung(
    tmp_path: Path, pools: Pools
) -> None:
    db = tmp_path / "c.db"
    url = f"sqlite:///{db}"
    pools.stop_after = 5  # killed after five trainings
    code, _, err = evolve("calibrate", *TINY, "--json", "--store", url)
    assert code == 130 and "interrupted" in err
    assert count(db, "evaluations") == 5
    pools.stop_after = None
    code, out, err = evolve("calibrate", *TINY, "--json", "--store", url)
    assert code == 0, err
    data = json.loads(out)
    assert data["trained"] == POINTS - 5 and pools.made[-1].requests == POINTS - 5
    assert count(db, "evaluations") == POINTS and "(resumed)" in err and f"[{POINTS - 5}/{POINTS - 5}]" in err
    assert (data["steps"], data["rungs"], data["target"], data["presets"], data["random"]) == (
        10,
        [5, 10],
        20,
        2,
        2,
    )
    names = [m["name"] for m in data["panel"]]
    assert names[:2] == ["preset:gpt2-small@32x1", "preset:llama3-8b@32x1"] and names[2:] == [
        "random:0",
        "random:1",
    ]
    assert len({m["genome_id"] for m in data["panel"]}) == 4 and all(
        m["params"] <= 100_000 for m in data["panel"]
    )
    assert data["failed"] == 0 and data["missing"] == 0
    rows = {r["steps"]: r for r in data["rows"]}
    assert sorted(rows) == [5, 10, 20]
    assert rows[5]["vs_full"]["n"] == 4 and rows[5]["vs_target"]["n"] == 4 and rows[10]["vs_full"] is None
    assert rows[5]["vs_target"]["k"] == 1 and rows[5]["vs_target"]["chance"] == 0.25
    assert rows[5]["loss_vs_full"]["n"] == 4 and rows[5]["loss_vs_target"]["n"] == 4
    assert rows[10]["loss_vs_full"] is None and rows[10]["loss_vs_target"] is None
    assert all(isinstance(m["loss"]["5"], float) for m in data["panel"])
    for r in rows.values():
        q = r["quality"]
        assert q["n"] == 4 and q["min"] <= q["q1"] <= q["median"] <= q["q3"] <= q["max"]
        assert r["failed"] == 0 and r["missing"] == 0
        values = sorted(m["quality"][str(r["steps"])] for m in data["panel"])
        assert (q["min"], q["max"]) == (values[0], values[-1])
    with Store(url, create=False) as store:
        run = store.get_run(data["run_id"])
        assert run is not None and run.kind == KIND and run.status == "finished"
        transfer = {(t.lower_fidelity, t.higher_fidelity): t for t in store.transfer(data["run_id"])}
        assert set(transfer) == {
            ("rung@5", "full@10"),
            ("rung@5", "target@20"),
            ("rung@10", "target@20"),
            ("loss@5", "full@10"),
            ("loss@5", "target@20"),
        }
        assert transfer[("rung@5", "target@20")].spearman == rows[5]["vs_target"]["spearman"]
        assert transfer[("loss@5", "target@20")].spearman == rows[5]["loss_vs_target"]["spearman"]
        stored = stored_summary(store, data["run_id"])
        assert stored is not None and stored["rows"] == data["rows"] and stored["panel"] == data["panel"]
        assert stored_summary(store, "nosuchrun") is None
    # a third invocation trains nothing; its table is the stored calibration's
    code, out, err = evolve("calibrate", *TINY, "--store", url)
    assert code == 0, err
    assert len(pools.made) == 2 and "4 of" not in err and f"{POINTS} of {POINTS} trainings stored" in err
    assert out.splitlines()[:-1] == calibration_lines({**data, "trained": 0})
    assert out.splitlines()[-1].startswith("0 trainings in")
    assert count(db, "transfer") == 5  # replaced, not doubled
    code, out, err = evolve("report", "--run", data["run_id"], "--store", url)
    assert code == 0, err
    lines = out.splitlines()
    assert lines == calibration_lines(stored) and any(
        line.split()[:2] == ["held-out", "loss"] for line in lines
    )


def test_a_members_loss_is_the_finite_loss_of_its_one_task() -> None:
    assert loss_of([("ok", {"loss": 2.5, "accuracy": 0.1})]) == 2.5
    assert loss_of([("ok", {"loss": 2.5}), ("ok", {"loss": 1.0})]) is None  # several tasks
    cases: list[list[tuple[str | None, dict[str, Any]]]] = [
        [("ok", {"accuracy": 0.1})],
        [("ok", {"loss": math.nan})],
        [("ok", {"loss": math.inf})],
        [("failed", {"loss": 1.0})],
        [(None, {})],
        [],
    ]
    for results in cases:
        assert loss_of(results) is None, results


def _settled(task: str) -> Plan:
    """A plan of four members whose quality rises with their index at every fidelity while
    their loss rises with it too: the loss ranks them in reverse; member 3 has no loss at 5."""
    plan = make_plan(task, 10, (5, 10), 20, 2, presets=2, max_params=100_000)
    for p in plan.points:
        metrics = {"quality": 0.1 * p.member + 0.001 * p.steps, "loss": 1.0 + p.member}
        if p.member == 3 and p.steps == 5:
            del metrics["loss"]
        p.settle("ok", metrics, "trained")
    return plan


def test_the_summary_ranks_each_rung_by_loss_on_one_task_only() -> None:
    data = summary(_settled("mqar"), resamples=200)
    rows = {r["steps"]: r for r in data["rows"]}
    assert rows[5]["vs_target"]["spearman"] == pytest.approx(1.0) and rows[5]["vs_target"]["recall"] == 1.0
    loss = rows[5]["loss_vs_target"]
    assert (
        loss["n"] == 3 and loss["spearman"] == pytest.approx(-1.0) and loss["recall"] == 0.0 and loss["weak"]
    )
    assert rows[5]["loss_vs_full"]["spearman"] == pytest.approx(-1.0)
    assert rows[10]["loss_vs_full"] is None and rows[10]["loss_vs_target"] is None
    assert [m["loss"]["5"] for m in data["panel"]] == [1.0, 2.0, 3.0, None]
    assert "held-out loss barely predicts the target's" in "\n".join(calibration_lines(data))
    several = summary(_settled("mqar,selective_copying"), resamples=200)
    assert all(r["loss_vs_full"] is None and r["loss_vs_target"] is None for r in several["rows"])
    assert all(v is None for m in several["panel"] for v in m["loss"].values())
    assert several["rows"][0]["vs_target"]["spearman"] == pytest.approx(1.0)
    assert "no held-out loss ranking: with several tasks" in "\n".join(calibration_lines(several))


def test_bad_input_is_one_line_before_anything_is_written(tmp_path: Path, pools: Pools) -> None:
    db = tmp_path / "b.db"
    url = f"sqlite:///{db}"
    for argv, words in (
        (["--rungs", "5,x"], "--rungs '5,x'"),
        (["--rungs", ","], "--rungs: no step count"),
        (["--target", "10"], "--target 10"),
        (["--target", "8"], "--target 8"),
        (["--steps", "0"], "--steps 0"),
        (["--random", "-1"], "--random -1"),
        (["--presets", "-1"], "--presets -1"),
        (["--promote", "0"], "--promote 0"),
        (["--task", "nope"], "unknown task 'nope'"),
        (["--workers", "0"], "--workers 0"),
        (["--timeout", "-1"], "--timeout"),
        (["--presets", "1", "--random", "1"], "a panel of 2 genomes"),
        (["--max-params", "10"], "--random"),
    ):
        code, out, err = evolve("calibrate", *TINY, *argv, "--store", url)
        assert code == 2 and out == "" and words in err and err.count("\n") == 1, (argv, err)
    assert count(db, "runs") == 0 and pools.made == []


@pytest.mark.slow
def test_a_calibration_trains_on_ray(tmp_path: Path) -> None:
    """The command's own pool: Ray, one worker; the second invocation trains nothing."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    code, out, err = evolve("calibrate", *TINY, "--workers", "1", "--json", "--store", url)
    assert code == 0, err
    data = json.loads(out)
    assert data["trained"] == POINTS and data["failed"] == 0 and f"[{POINTS}/{POINTS}]" in err
    code, out, _ = evolve("calibrate", *TINY, "--workers", "1", "--json", "--store", url)
    assert code == 0 and json.loads(out)["trained"] == 0
