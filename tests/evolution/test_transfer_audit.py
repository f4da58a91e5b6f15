"""Fidelity transfer: stored with each generation of a multi-fidelity run, equal to scipy's
numbers on the candidates trained at both fidelities, reported, and warned about below 0.3."""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dogma_evolve.evaluation import EvalResult
from dogma_evolve.evaluation.table import InProcessPool
from dogma_evolve.evaluation.transfer import MIN_INTERVAL_PAIRS, WEAK_TRANSFER, is_weak, rank_transfer
from dogma_evolve.evolution.cli import main as cli
from dogma_evolve.evolution.engine import Engine, RunConfig
from dogma_evolve.evolution.evaluating import quality_of
from dogma_evolve.evolution.report.summary import report_lines, run_report
from dogma_evolve.evolution.study import running as study_running
from dogma_evolve.evolution.transfer_audit import candidate_pair, ranked_by, transfer_warning
from dogma_evolve.store import EvaluationIn, Store, TransferIn

FIXTURE = Path(__file__).parents[1] / "store" / "fixtures" / "release_0_1.db"
OLD_RUN = "15ea3469eb87"  # the fixture's one run: mqar, generations 0 and 1, single fidelity

# steps 5, min_steps 3, every child promoted: each generation adds up to 4 candidates at both
MULTI = RunConfig(
    population=4, generations=1, steps=5, min_steps=3, promote=1.0, task="mqar", seed=3, max_params=12_000
)


@pytest.fixture(scope="module")
def multi_run(tmp_path_factory):
    """A tiny real multi-fidelity run, trained in this process."""
    url = f"sqlite:///{tmp_path_factory.mktemp('transfer') / 'multi.db'}"
    with Store(url) as store:
        engine = Engine(MULTI, store, InProcessPool())
        engine.run()
        yield store, engine.run_id


def pairs_from_rows(
    store: Store, run_id: str, through: int, by: str = "loss"
) -> tuple[list[float], list[float]]:
    """The test's own reading: births in (generation, slot) order; at 3 steps what the first
    stage promoted by (minus the held-out loss under the default `promote_by`, else quality),
    quality at 5."""
    low, high = [], []
    births = sorted(store.individuals(run_id), key=lambda r: (r.generation, r.slot))
    for rec in births:
        if rec.generation > through:
            continue
        at = {e.fidelity: e for e in rec.evaluations if e.status == "ok" and e.task == "mqar"}
        if 3 in at and 5 in at:
            low.append(-at[3].metrics["loss"] if by == "loss" else quality_of(at[3].metrics))
            high.append(quality_of(at[5].metrics))
    return low, high


def bootstrap_with_scipy(low, high, statistic, resamples=2000, seed=0):
    """The interval resample by resample with scipy's own statistic (the module vectorises it)."""
    x, y = np.asarray(low), np.asarray(high)
    index = np.random.default_rng(seed).integers(len(x), size=(resamples, len(x)))
    with warnings.catch_warnings():  # a constant resample is undefined: NaN, left out
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        values = np.array([statistic(x[i], y[i]).statistic for i in index])
    values = values[np.isfinite(values)]
    return tuple(np.percentile(values, [2.5, 97.5]))


def test_a_multi_fidelity_run_stores_its_transfer_per_generation_as_scipy_computes_it(multi_run):
    store, run_id = multi_run
    rows = store.transfer(run_id)
    assert [t.generation for t in rows] == [0, 1]
    assert all((t.lower_fidelity, t.higher_fidelity, t.ranked_by) == (3, 5, "loss") for t in rows)
    for t in rows:
        low, high = pairs_from_rows(store, run_id, t.generation)  # cumulative up to t.generation
        assert t.n == len(low) >= 4
        assert t.spearman == pytest.approx(stats.spearmanr(low, high).statistic, abs=1e-12)
        assert t.kendall == pytest.approx(stats.kendalltau(low, high).statistic, abs=1e-12)
        if t.n < MIN_INTERVAL_PAIRS:  # too few for a bootstrap interval
            assert (t.spearman_low, t.spearman_high, t.kendall_low, t.kendall_high) == (None,) * 4
            continue
        assert (t.spearman_low, t.spearman_high) == pytest.approx(
            bootstrap_with_scipy(low, high, stats.spearmanr), abs=1e-9
        )
        assert (t.kendall_low, t.kendall_high) == pytest.approx(
            bootstrap_with_scipy(low, high, stats.kendalltau), abs=1e-9
        )
    assert rows[1].n > rows[0].n  # cumulative: generation 1 adds its promoted children
    assert rows[1].n >= MIN_INTERVAL_PAIRS and rows[1].spearman_low is not None


def test_the_report_shows_the_stored_transfer(multi_run, capsys):
    store, run_id = multi_run
    data = run_report(store, run_id)
    stored = store.transfer(run_id)
    assert [t["generation"] for t in data["transfer"]] == [0, 1]
    assert all(t["stored"] for t in data["transfer"])
    assert data["transfer"][-1]["spearman"] == stored[-1].spearman
    assert data["transfer_warning"] == transfer_warning(data["transfer"])
    assert any(
        line.startswith("fidelity transfer (held-out loss, lowest first after 3 steps")
        for line in report_lines(data)
    )
    assert cli.main(["report", "--store", store.url, "--run", run_id, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["transfer"] == json.loads(json.dumps(data["transfer"]))


def test_a_resumed_run_stores_the_transfer_an_uninterrupted_one_does(multi_run, tmp_path):
    store, run_id = multi_run
    with Store(f"sqlite:///{tmp_path / 'resumed.db'}") as other:
        first = Engine(RunConfig(**{**MULTI.to_dict(), "generations": 0}), other, InProcessPool())
        first.run()
        assert [t.generation for t in other.transfer(first.run_id)] == [0]
        Engine.resume(first.run_id, other, InProcessPool(), generations=1).run()
        resumed = other.transfer(first.run_id)
    strip = [{**t.__dict__, "run_id": None} for t in resumed]
    assert strip == [{**t.__dict__, "run_id": None} for t in store.transfer(run_id)]


def test_a_run_promoting_by_quality_ranks_its_transfer_by_quality(tmp_path):
    """The lower side is what the first stage promoted by: quality here, so the rows say so
    and equal scipy's numbers on the qualities, not on the losses."""
    config = RunConfig(**{**MULTI.to_dict(), "promote_by": "quality", "generations": 0})
    with Store(f"sqlite:///{tmp_path / 'quality.db'}") as store:
        engine = Engine(config, store, InProcessPool())
        engine.run()
        (t,) = store.transfer(engine.run_id)
        low, high = pairs_from_rows(store, engine.run_id, 0, by="quality")
        data = run_report(store, engine.run_id)
    assert t.ranked_by == "quality" and t.n == len(low) >= 4
    assert t.spearman == pytest.approx(stats.spearmanr(low, high).statistic, abs=1e-12)
    assert data["transfer"][0]["ranked_by"] == "quality"
    assert any(line.startswith("fidelity transfer (quality after 3 steps") for line in report_lines(data))


def test_a_first_stage_without_a_loss_is_left_out_of_a_loss_ranked_pair():
    rows = [
        EvaluationIn("g", "mqar", 3, 1, "ok", {"quality": 0.2, "loss": 2.0}, None, 0.0),
        EvaluationIn("g", "mqar", 3, 2, "ok", {"quality": 0.4, "loss": 1.0}, None, 0.0),
        EvaluationIn("g", "mqar", 5, 1, "ok", {"quality": 0.5, "loss": 0.5}, None, 0.0),
    ]
    assert candidate_pair(rows, "mqar", "loss") == pytest.approx((-1.5, 0.5))
    assert candidate_pair(rows, "mqar") == pytest.approx((0.3, 0.5))
    no_loss = [EvaluationIn("g", "mqar", 3, 1, "ok", {"quality": 0.2}), rows[2]]
    assert candidate_pair(no_loss, "mqar", "loss") is None
    assert candidate_pair(no_loss, "mqar", "quality") == pytest.approx((0.2, 0.5))


@pytest.mark.parametrize(
    ("changes", "by"),
    [
        ({}, "loss"),
        ({"promote_by": "quality"}, "quality"),
        ({"objectives": ("quality", "params")}, "quality"),
    ],
)
def test_the_transfer_ranks_by_what_the_first_stage_promotes_by(changes, by):
    assert ranked_by(RunConfig(**{**MULTI.to_dict(), **changes})) == by


def test_a_single_fidelity_run_stores_no_transfer(tmp_path):
    config = RunConfig(population=2, generations=0, steps=2, task="mqar", seed=1, max_params=12_000)
    with Store(f"sqlite:///{tmp_path / 'single.db'}") as store:
        engine = Engine(config, store, InProcessPool())
        engine.run()
        assert store.transfer(engine.run_id) == []
        data = run_report(store, engine.run_id)
        assert data["transfer"] == [] and data["transfer_warning"] is None


class InvertingPool:
    """A synthetic pool: quality from the genome id, reversed at the full fidelity, so the
    first stage ranks candidates exactly against the second (ρ = -1)."""

    def evaluate(self, requests, on_result=None):
        out = []
        for r in requests:
            q = int(hashlib.sha256(r.genome_id.encode()).hexdigest()[:8], 16) / 16**8
            q = q if r.fidelity == MULTI.min_steps else 1.0 - q
            metrics = {"quality": q, "accuracy": q, "loss": 2.0 - q, "params": 1000}  # loss ranks as q
            result = EvalResult.for_request(r, "ok", metrics=metrics)
            out.append(result)
            if on_result:
                on_result(result)
        return out


def test_a_weak_transfer_warns_in_the_report_and_the_run_summary(tmp_path, monkeypatch, capsys):
    url = f"sqlite:///{tmp_path / 'weak.db'}"
    monkeypatch.setattr(study_running, "pool_for", lambda engine, store: nullcontext(InvertingPool()))
    argv = ["run", "--store", url, "--task", "mqar", "--steps", "5", "--min-steps", "3", "--promote", "1"]
    argv += ["--population", "4", "--generations", "1", "--seed", "3", "--max-params", "12000", "--quiet"]
    assert cli.main(argv) == 0
    summary = capsys.readouterr().out
    assert "WARNING: weak fidelity transfer: Spearman ρ -1.00" in summary
    with Store(url) as store:
        (run,) = store.list_runs()
        last = store.transfer(run.id)[-1]
        assert last.spearman == pytest.approx(-1.0) and last.kendall == pytest.approx(-1.0)
    assert cli.main(["report", "--store", url]) == 0
    report = capsys.readouterr().out
    assert "WARNING: weak fidelity transfer" in report and "gen 1: n" in report
    assert cli.main(["run", *argv[1:], "--json"]) == 0  # the same run again: every result cached
    assert json.loads(capsys.readouterr().out)["transfer_warning"].startswith("WARNING")


@pytest.mark.parametrize(
    ("rho", "weak"), [(None, False), (-0.5, True), (0.29, True), (0.3, False), (0.9, False)]
)
def test_the_warning_is_given_below_three_tenths(rho, weak):
    assert WEAK_TRANSFER == 0.3
    assert is_weak(rho) is weak
    row = {"spearman": rho, "spearman_low": None, "spearman_high": None, "n": 7}
    row |= {"lower_fidelity": 3, "higher_fidelity": 5}
    assert (transfer_warning([row]) is not None) is weak
    assert transfer_warning([]) is None


def test_rank_transfer_takes_any_two_lists():
    # e.g. the losses of a scaling ladder's rungs at two sizes: lower is better on both
    small = [3.1, 2.9, 2.7, 2.8, 2.5, 2.45]
    large = [2.6, 2.5, 2.2, 2.4, 2.1, 2.0]
    t = rank_transfer(small, large)
    assert t.n == 6 and t.spearman == pytest.approx(stats.spearmanr(small, large).statistic)
    assert t.kendall == pytest.approx(stats.kendalltau(small, large).statistic)
    assert t.spearman_low <= t.spearman <= t.spearman_high
    assert rank_transfer(small, large) == t  # a fixed seed: the same interval every time
    assert rank_transfer([1, 2], [1, 2]).spearman is None  # too few candidates
    few = rank_transfer(small[:5], large[:5])
    assert few.spearman is not None and few.spearman_low is None  # no interval below six
    assert rank_transfer([1, 1, 1, 1], [1, 2, 3, 4]).spearman is None  # a constant side
    with pytest.raises(ValueError, match="differ in length"):
        rank_transfer([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="finite"):
        rank_transfer([1, 2, float("nan")], [1, 2, 3])


def test_a_store_before_0004_opens_reports_and_resumes_with_transfer(tmp_path):
    copy = tmp_path / "release_0_1.db"
    shutil.copyfile(FIXTURE, copy)
    url = f"sqlite:///{copy}"
    with Store(url) as store:
        assert store.transfer(OLD_RUN) == []  # the table is new; the old run has no rows
        old = run_report(store, OLD_RUN)
        assert old["transfer"] == [] and old["transfer_warning"] is None
        assert old["compute"]["evaluations"] == 8
        assert old["compute"]["without"] == {"train_tokens": 8, "train_flops": 8}  # release 0.1 rows
        assert any("8 written before compute was recorded" in line for line in report_lines(old))
        # resume through the engine: generation 2 is trained by today's code and committed
        Engine.resume(OLD_RUN, store, InProcessPool(), generations=2).run()
        assert store.get_run(OLD_RUN).last_generation == 2
        new = run_report(store, OLD_RUN)
        assert new["generations"][2]["compute"]["train_tokens"] > 0
        assert new["compute"]["without"] == {"train_tokens": 8, "train_flops": 8}
        assert new["compute"]["train_flops"] == new["generations"][2]["compute"]["train_flops"]
        # a transfer row commits on the upgraded store and reads back
        parent = store.population(OLD_RUN)[0]
        store.commit_generation(
            OLD_RUN,
            3,
            members=[("id", parent.id)],
            transfer=[TransferIn(3, 5, 4, 0.2, -0.9, 1.0, 0.1, -0.8, 1.0)],
        )
        (row,) = store.transfer(OLD_RUN)
        assert (row.generation, row.lower_fidelity, row.higher_fidelity, row.n, row.spearman) == (
            3,
            3,
            5,
            4,
            0.2,
        )
