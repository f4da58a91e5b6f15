"""The screen audit: which bred children a run's first stage left untrained, and its summary."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from scipy import stats

from benchmarks.screen_audit import Child, children, main, summarise
from benchmarks.search_dogma import arm_config, drive_engine
from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.store import Store
from tests.benchmarks.test_search_pairing import FLOPS_PER_STEP, FakePool

SHARED = {"population": 8, "steps": 10, "max_params": 60_000, "task": "suite"}


def fake_quality(genome_id: str, steps: int) -> float:
    """`FakePool`'s quality of a genome at a fidelity."""
    return int(hashlib.sha256(f"{genome_id}/{steps}".encode()).hexdigest()[:8], 16) / 2**32


class LossPool(FakePool):
    """`FakePool` with a held-out loss (3 - quality), which the first stage promotes by."""

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: Callable[[EvalResult], None] | None = None
    ) -> list[EvalResult]:
        results = super().evaluate(requests)
        for result in results:
            result.metrics["loss"] = 3.0 - result.metrics["quality"]
            if on_result:
                on_result(result)
        return results


def test_children_are_the_bred_ones_with_their_first_stage_and_full_results(tmp_path: Path) -> None:
    config = arm_config("default", 3, SHARED)
    first = config.first_fidelity
    assert first is not None
    with Store(f"sqlite:///{tmp_path / 'run.db'}") as store:
        run_id = drive_engine(config, store, LossPool(), budget=400 * FLOPS_PER_STEP)
        kids = children(store, run_id, config)
        bred = {i.genome_id for i in store.individuals(run_id) if i.generation >= 1}
        with_seeds = children(store, run_id, config, first_generation=0)
    assert {c.generation for c in with_seeds if c not in kids} == {0}  # the initial population added
    assert kids and {c.genome_id for c in kids} <= bred
    assert len({c.genome_id for c in kids}) == len(kids)  # each genome once
    promoted = [c for c in kids if c.full is not None]
    assert promoted and len(promoted) < len(kids)  # the first stage left some untrained
    for c in kids:
        assert c.generation >= 1 and c.first_loss == pytest.approx(3.0 - fake_quality(c.genome_id, first))
        assert c.full is None or c.full == pytest.approx(fake_quality(c.genome_id, config.steps))
    # the promoted ones are the lowest first-stage losses of their generation
    for g in {c.generation for c in kids}:
        group = sorted((c for c in kids if c.generation == g), key=lambda c: c.first_loss)
        k = sum(c.full is not None for c in group)
        assert all(c.full is not None for c in group[:k])


def test_a_single_stage_run_has_nothing_screened(tmp_path: Path) -> None:
    config = arm_config("random", 3, SHARED)
    assert config.first_fidelity is None
    with Store(f"sqlite:///{tmp_path / 'run.db'}") as store:
        run_id = drive_engine(config, store, LossPool(), budget=100 * FLOPS_PER_STEP)
        with pytest.raises(ValueError, match="no first stage"):
            children(store, run_id, config)
    assert main(["--store", f"sqlite:///{tmp_path / 'run.db'}", "--out", str(tmp_path / "a.json")]) == 2


def test_summary_counts_what_the_screen_lost() -> None:
    kids = [
        Child(1, "a", "", 0, "m", 2.0, 0.3),  # promoted
        Child(1, "b", "", 0, "m", 2.1, None),
        Child(1, "c", "", 0, "m", 2.2, None),
        Child(1, "d", "", 0, "m", 2.3, None),
        Child(1, "e", "", 0, "m", 2.4, None),
        Child(2, "f", "", 0, "x", 2.0, 0.2),  # promoted
        Child(2, "g", "", 0, "x", 2.5, None),
    ]
    trained = {"b": 0.5, "c": 0.1, "d": 0.2, "e": 0.0, "g": 0.05}
    s = summarise(kids, trained)
    one = s["generations"][1]
    assert one["promoted"] == {"n": 1, "mean": 0.3, "best": 0.3}
    assert one["unpromoted"]["n"] == 4 and one["unpromoted"]["best"] == 0.5
    assert one["recall"] == [0, 1]  # the best in full ("b", 0.5) was screened out
    expected = stats.spearmanr([-2.0, -2.1, -2.2, -2.3, -2.4], [0.3, 0.5, 0.1, 0.2, 0.0]).statistic
    assert one["rho"][0] == pytest.approx(expected) and one["rho"][1:] == (None, None)  # < 6: no interval
    assert s["generations"][2]["recall"] == [1, 1] and s["generations"][2]["rho"] is None  # < 3 pairs
    assert s["all"]["recall"] == [1, 2]  # top 2 overall: b (0.5), a (0.3)
    rho, low, high = s["all"]["rho"]
    assert rho == pytest.approx(
        stats.spearmanr(
            [-2.0, -2.1, -2.2, -2.3, -2.4, -2.0, -2.5], [0.3, 0.5, 0.1, 0.2, 0.0, 0.2, 0.05]
        ).statistic
    )
    assert low is not None and high is not None and low <= rho <= high
    assert s["best_unpromoted"]["genome_id"] == "b" and s["best_unpromoted"]["quality"] == 0.5


class FailingFullPool(LossPool):
    """`LossPool` whose full-fidelity trainings fail (a timeout) for half of the genomes."""

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: Callable[[EvalResult], None] | None = None
    ) -> list[EvalResult]:
        out = []
        for result, request in zip(super().evaluate(requests), requests, strict=True):
            if request.fidelity == SHARED["steps"] and fake_quality(request.genome_id, 0) < 0.5:
                result = EvalResult.for_request(request, "timeout", reason="over its limit")
            if on_result:
                on_result(result)
            out.append(result)
        return out


def test_a_promoted_child_whose_full_training_failed_counts_as_promoted_at_zero(tmp_path: Path) -> None:
    config = arm_config("default", 3, SHARED)
    with Store(f"sqlite:///{tmp_path / 'run.db'}") as store:
        run_id = drive_engine(config, store, FailingFullPool(), budget=400 * FLOPS_PER_STEP)
        kids = children(store, run_id, config)
    failed = [c for c in kids if fake_quality(c.genome_id, 0) < 0.5 and c.full is not None]
    assert failed and all(c.full == 0.0 for c in failed)  # never None: it is not retrained
