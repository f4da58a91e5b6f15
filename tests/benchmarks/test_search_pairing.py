"""The DOGMA search benchmark's protocol: pairing, statistics, FLOP budget, fair incumbents.

Most tests drive the real engine and store with `FakePool`, which trains nothing: its
quality is a fixed function of the genome id and its training FLOPs are
`FLOPS_PER_STEP x steps`, so budgets are exact. One test (slow) trains for real, 3 steps.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from benchmarks import search_flops, search_stats
from benchmarks.search_dogma import (
    StoredRunMismatch,
    arm_config,
    check_settings,
    collect,
    drive_engine,
    retrain_seeds,
    run_one,
)
from benchmarks.search_retrain import known_retrains, retrain_incumbents, retrained_curve
from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.store import Store

FLOPS_PER_STEP = 1_000
# confirm 1: the budgets below count each child's one training (confirmation is its own test)
SHARED: dict[str, Any] = {"population": 4, "steps": 10, "max_params": 60_000, "task": "suite", "confirm": 1}


class FakePool:
    """Answers every request at once: quality from the genome id, FLOPs from the steps."""

    def __init__(self) -> None:
        self.requests: list[EvalRequest] = []

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: Callable[[EvalResult], None] | None = None
    ) -> list[EvalResult]:
        out = []
        for r in requests:
            self.requests.append(r)
            digest = int(hashlib.sha256(f"{r.genome_id}/{r.fidelity}".encode()).hexdigest()[:8], 16)
            quality = digest / 2**32
            metrics = {"quality": quality, "accuracy": quality, "steps": r.fidelity}
            metrics["train_flops"] = FLOPS_PER_STEP * r.fidelity
            result = EvalResult.for_request(r, "ok", metrics=metrics)
            if on_result:
                on_result(result)
            out.append(result)
        return out


def open_store(path: Path) -> Store:
    return Store(f"sqlite:///{path}")


def generation_zero(store: Store) -> list[str]:
    (run,) = store.list_runs()
    return sorted(i.genome_id for i in store.individuals(run.id) if i.generation == 0)


# -- pairing ------------------------------------------------------------------------------
def test_engine_arms_of_one_seed_share_generation_zero(tmp_path: Path) -> None:
    from dogma_evolve.evolution.strategies import STRATEGIES

    arms = ["default", "random", "sha"] + [a for a in ("aging", "local") if a in STRATEGIES]
    firsts = {}
    for arm in arms:
        with open_store(tmp_path / f"{arm}.db") as store:
            drive_engine(arm_config(arm, 7, SHARED), store, FakePool(), budget=1)
            firsts[arm] = generation_zero(store)
    assert len(firsts["default"]) == SHARED["population"]
    assert all(ids == firsts["default"] for ids in firsts.values()), firsts
    with open_store(tmp_path / "other-seed.db") as store:  # another seed: another start
        drive_engine(arm_config("default", 8, SHARED), store, FakePool(), budget=1)
        assert generation_zero(store) != firsts["default"]


def test_arms_differ_only_in_what_they_are() -> None:
    default, rand, sha = (arm_config(a, 3, SHARED) for a in ("default", "random", "sha"))
    assert (default.seed, rand.seed, sha.seed) == (3, 3, 3)
    assert rand.strategy == sha.strategy == "random" and rand.min_steps == 0
    assert sha.min_steps == default.min_steps and default.first_fidelity is not None
    assert arm_config("optuna", 3, SHARED).first_fidelity is None  # trials train in full


# -- statistics ---------------------------------------------------------------------------
def test_paired_t_agrees_with_scipy() -> None:
    rng = random.Random(5)
    a = [rng.gauss(0.3, 0.05) for _ in range(12)]
    b = [x - 0.02 + rng.gauss(0, 0.03) for x in a]
    t, p = search_stats.paired_t(a, b)
    want = stats.ttest_rel(a, b)
    assert t == pytest.approx(float(want.statistic), rel=1e-9)
    assert p == pytest.approx(float(want.pvalue), rel=1e-9)


def test_sign_flip_test_on_obvious_cases() -> None:
    # all 8 differences positive: only the all-plus and all-minus patterns are as extreme
    assert search_stats.sign_flip_p([1.0] * 8) == pytest.approx(2 / 2**8)
    assert search_stats.sign_flip_p([1.0, -1.0]) == 1.0
    # d = (3, 1, -1), |sum d| = 3; the signed sums 3+1-1, 3+1+1, 3-1+1, 3-1-1 = 3, 5, 3, 1
    # and their mirrors: 6 of the 8 patterns reach 3
    assert search_stats.sign_flip_p([3.0, 1.0, -1.0]) == pytest.approx(6 / 8)
    # beyond the exact range: a Monte-Carlo estimate, tiny for 20 equal signs
    assert search_stats.sign_flip_p([0.5] * 20, draws=2_000) == pytest.approx(1 / 2_001)


def test_paired_verdict_needs_two_standard_errors() -> None:
    a = [0.50, 0.52, 0.49, 0.51, 0.53, 0.50]
    clear = search_stats.paired(a, [x - 0.05 for x in a])
    assert clear.mean == pytest.approx(0.05) and clear.se == pytest.approx(0.0, abs=1e-12)
    assert clear.beats() and "met" in clear.line("default", "random")
    noisy = search_stats.paired(a, [0.51, 0.50, 0.50, 0.52, 0.50, 0.51])
    assert abs(noisy.z) < 2 and not noisy.beats()
    assert "missed" in noisy.line("default", "random")
    d = search_stats.differences(a, [0.51, 0.50, 0.50, 0.52, 0.50, 0.51])
    assert noisy.se == pytest.approx(stats.sem(d))
    with pytest.raises(ValueError):
        search_stats.paired([1.0, 2.0], [1.0])


def test_curves_are_step_functions_of_the_budget() -> None:
    curve = [(10.0, 0.1), (30.0, 0.4)]
    assert search_stats.value_at(curve, 5.0) is None
    assert search_stats.value_at(curve, 10.0) == 0.1 and search_stats.value_at(curve, 29.0) == 0.1
    rows = search_stats.mean_curve([curve, [(20.0, 0.2)]], [10.0, 20.0, 40.0])
    assert [r[3] for r in rows] == [1, 2, 2]
    assert rows[2][1] == pytest.approx(0.3) and math.isnan(search_stats.mean_curve([], [1.0])[0][1])
    assert search_stats.grid(8.0, 4) == [2.0, 4.0, 6.0, 8.0]


# -- FLOP budget --------------------------------------------------------------------------
def test_flop_budget_stops_the_run_at_the_budget(tmp_path: Path) -> None:
    config = arm_config("random", 1, SHARED)  # single fidelity: each child costs 10 steps
    per_child = FLOPS_PER_STEP * SHARED["steps"]
    budget = 9 * per_child  # generation 0 (4 children), then 2 a generation: crossed in gen 3
    with open_store(tmp_path / "run.db") as store:
        run_id = drive_engine(config, store, FakePool(), budget)
        spent = search_flops.run_flops(store, run_id, config)
        record = store.get_run(run_id)
        assert record is not None and record.last_generation == 3
        assert spent == 10 * per_child >= budget  # stopped after the generation that reached it
        rows = search_flops.rows(store, run_id, config)
        assert [r.cumulative for r in rows] == [per_child * (k + 1) for k in range(10)]
        best = search_flops.incumbent(rows, budget)
        assert best is not None and best.cumulative <= budget
        assert best.quality == max(r.quality for r in rows[:9] if r.quality is not None)
        # the same rule as the project's compute summary
        from dogma_evolve.evolution.report.summary import compute_totals

        totals = compute_totals(store.individuals(run_id), config.task, False)
        assert spent == sum(b["train_flops"] for b in totals.values())
        # driving it again to the same budget trains nothing more
        pool = FakePool()
        drive_engine(config, store, pool, budget)
        assert pool.requests == []


def test_a_stored_run_of_other_settings_is_refused_not_reported(tmp_path: Path) -> None:
    """A default changed since a run was stored: the benchmark must not report the old run
    under the arm's name (the surrogate's default changed this way)."""
    with open_store(tmp_path / "run.db") as store:
        run_id = drive_engine(arm_config("surrogate", 1, SHARED), store, FakePool(), budget=1)
        check_settings(store, run_id, arm_config("surrogate", 1, SHARED), tmp_path / "run.json")
        with pytest.raises(StoredRunMismatch, match=r"surrogate 10 -> 1\): move it away"):
            check_settings(store, run_id, arm_config("default", 1, SHARED), tmp_path / "run.json")
    with open_store(tmp_path / "sha.db") as store:  # random search breeds nothing: the surrogate is moot
        sha = arm_config("sha", 1, SHARED)
        run_id = drive_engine(dataclasses.replace(sha, surrogate=10), store, FakePool(), budget=1)
        check_settings(store, run_id, sha, tmp_path / "sha.json")
    with open_store(tmp_path / "old.db") as store:  # stored before the exploration pool
        default = arm_config("default", 1, SHARED)
        assert default.surrogate == 1  # no surrogate: its exploration settings are moot
        run_id = drive_engine(
            dataclasses.replace(default, explore=0.25, explore_pool=0), store, FakePool(), budget=1
        )
        check_settings(store, run_id, default, tmp_path / "old.json")
        with pytest.raises(StoredRunMismatch, match=r"explore 0.25 -> 0.6.*move it away"):
            check_settings(store, run_id, dataclasses.replace(default, surrogate=10), tmp_path / "old.json")


def test_multi_fidelity_curve_counts_only_full_results(tmp_path: Path) -> None:
    config = arm_config("default", 2, SHARED)
    assert config.first_fidelity is not None
    with open_store(tmp_path / "run.db") as store:
        run_id = drive_engine(config, store, FakePool(), budget=1)
        rows = search_flops.rows(store, run_id, config)
    low = [r for r in rows if r.fidelity == config.first_fidelity]
    full = [r for r in rows if r.fidelity == config.steps]
    assert len(low) == SHARED["population"] and full and all(r.quality is None for r in low)
    assert max(r.cumulative for r in low) < min(r.cumulative for r in full)  # first stage first
    assert search_flops.curve(rows)[0][0] == full[0].cumulative


def test_optuna_arm_stops_at_the_budget_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    from benchmarks.optuna_dogma import run_optuna

    config = arm_config("optuna", 4, SHARED)
    per_trial = FLOPS_PER_STEP * SHARED["steps"]
    with open_store(tmp_path / "optuna.db") as store:
        run_id = run_optuna(store, config, FakePool(), 3 * per_trial)
        assert search_flops.run_flops(store, run_id, config) == 3 * per_trial
        pool = FakePool()
        run_optuna(store, config, pool, 5 * per_trial, run_id=run_id)  # resumed, replayed
        assert len(pool.requests) == 2
        assert search_flops.run_flops(store, run_id, config) == 5 * per_trial
        births = store.individuals(run_id)
        assert [b.generation for b in births] == [0, 1, 2, 3, 4]
        assert len({b.genome_id for b in births}) == 5
        assert all(r.fidelity == SHARED["steps"] for r in pool.requests)


def test_optuna_runs_record_their_version_and_resume_only_under_it(tmp_path: Path) -> None:
    optuna = pytest.importorskip("optuna")
    from benchmarks.optuna_dogma import run_optuna, version_mismatch

    config = arm_config("optuna", 4, SHARED)
    with open_store(tmp_path / "optuna.db") as store:
        run_id = run_optuna(store, config, FakePool(), FLOPS_PER_STEP * SHARED["steps"])
        record = store.get_run(run_id)
        assert record is not None and record.config["optuna"] == optuna.__version__
        assert version_mismatch(record.config) is None
        assert version_mismatch({}) is None  # stored before versions were recorded
        why = version_mismatch({**record.config, "optuna": "0.0.1"})
        assert why is not None and why.startswith(f"began under Optuna 0.0.1, not {optuna.__version__}")
        # the benchmark refuses to report or resume a run another Optuna began, in one line
        other = store.create_run({**record.config, "optuna": "0.0.1"}, 4, config.task)
        check_settings(store, run_id, config, tmp_path / "optuna.json")
        with pytest.raises(StoredRunMismatch, match="its run began under Optuna 0.0.1"):
            check_settings(store, other, config, tmp_path / "optuna.json")
        with pytest.raises(ValueError, match=f"run {other} began under Optuna 0.0.1"):
            run_optuna(store, config, FakePool(), FLOPS_PER_STEP * SHARED["steps"], run_id=other)


# -- the incumbent, re-trained ------------------------------------------------------------
def fake_row(cumulative: int, quality: float | None, genome: str) -> search_flops.Row:
    return search_flops.Row(0, 10, 100, cumulative, quality, genome, "", 1_000, 0)


def test_the_curve_retrains_each_levels_incumbent_once() -> None:
    # incumbents: none within 100, "a" within 200, "b" within 300 and 400
    rows = [
        fake_row(150, 0.3, "a"),
        fake_row(220, None, "x"),
        fake_row(280, 0.5, "b"),
        fake_row(390, 0.4, "c"),
    ]
    levels = search_stats.grid(400, 4)
    trained: list[str] = []

    def train(row: search_flops.Row, seeds: list[int]) -> list[float]:
        trained.append(row.genome_id)
        assert len(seeds) == 3 and not set(seeds) & {0}
        return [0.1, 0.2, 0.3] if row.genome_id == "a" else [0.4, 0.4, 0.4]

    known: dict[str, dict[str, Any]] = {}
    assert retrained_curve(rows, levels, known) is None  # nothing re-trained yet
    assert retrain_incumbents(rows, levels, 0, {0}, known, train) == 2
    assert trained == ["a", "b"]  # "b" once for two levels; "c" never led
    curve = retrained_curve(rows, levels, known)
    assert curve is not None and [x for x, _ in curve] == [200.0, 300.0, 400.0]
    assert [q for _, q in curve] == pytest.approx([0.2, 0.4, 0.4])
    assert retrain_incumbents(rows, levels, 0, {0}, known, train) == 0  # a rerun trains nothing
    # a side file from before the curve: its endpoint re-training is reused, not redone
    old = {"retrained": {"genome_id": "b", "seeds": [1, 2, 3], "qualities": [0.4, 0.4, 0.4]}}
    assert set(known_retrains(old)) == {"b"}


def test_retrain_seeds_avoid_the_searchs_seeds() -> None:
    first = retrain_seeds(0, "abc", set())
    assert len(set(first)) == 3
    again = retrain_seeds(0, "abc", {first[0]})
    assert first[0] not in again and again[:2] == first[1:]


@pytest.mark.slow  # trains real models (5 of them, 3 steps each)
def test_incumbent_is_retrained_under_unused_seeds(tmp_path: Path) -> None:
    # real training, as small as it gets: 2 genomes of generation 0 at 3 steps, a fast task
    shared = {**SHARED, "steps": 3, "population": 2, "task": "selective_copying"}
    config = arm_config("random", 0, shared)
    done = run_one(("random", 0, shared, 1.0, str(tmp_path), 4))  # budget 1 FLOP: nothing fits
    assert "retrained" not in done
    empty = collect(tmp_path, "random", 0, shared, 1.0, 4)
    assert empty is not None and empty["no_result"] and empty["score"] == 0.0
    with open_store(tmp_path / "random-seed0.db") as store:
        first = search_flops.rows(store, done["run_id"], config)[0]
    budget = float(first.cumulative)  # the first training fits: it is the incumbent
    job = ("random", 0, shared, budget, str(tmp_path), 4)
    done = run_one(job)
    again = done["retrained"]
    assert len(again["seeds"]) == 3 and len(again["qualities"]) == 3
    with open_store(tmp_path / "random-seed0.db") as store:
        used = search_flops.search_seeds(store, done["run_id"])
        best = search_flops.incumbent(search_flops.rows(store, done["run_id"], config), budget)
        assert len(store.individuals(done["run_id"])) == 2  # the search trained nothing more
    assert used and not set(again["seeds"]) & used
    assert best is not None and best.genome_id == first.genome_id == again["genome_id"]
    row = collect(tmp_path, "random", 0, shared, budget, 4)
    assert row is not None and not row["no_result"]
    assert row["score"] == pytest.approx(sum(again["qualities"]) / 3)
    assert row["retrained_curve"] == [(budget, pytest.approx(row["score"]))]  # 3 levels hold none
    assert row["observed"] == best.quality
    side = json.loads((tmp_path / "random-seed0.json").read_text())
    assert run_one(job)["retrained"] == side["retrained"]  # a rerun skips both stages
