"""`evolve run --ladder`: the Pareto elite taken up a size ladder, ranked by extrapolated loss.

The command-line tests train nothing: the pool is a table in which the search's quality and
the ladder's loss are known functions of the genome (each design family has its own
exponent), so the ranking, the store rows, the transfer and the resume are checked in
seconds. `test_scale.py` trains a real ladder end to end.
"""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dogma_evolve.evaluation import EvalRequest
from dogma_evolve.evaluation.scaling import fit_power_law
from dogma_evolve.evaluation.table import TableEvaluator
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.scale.ladder import MIN_DECADES, Design
from dogma_evolve.evolution.scale.search_ladder import compact_sizes, elite_of, extrapolate
from dogma_evolve.evolution.study import running as study_running
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import account
from dogma_evolve.store import LadderRankIn, Store, StoreError, TransferIn
from tests.in_process import evolve_in_process as _evolve

PINNED = {"vocab": 257, "max_len": 64}


def _genome(kind: str, width: int = 32) -> Genome:
    return Genome.from_dict(
        {
            "regions": [
                {
                    "id": "s0",
                    "type": "structural",
                    "settings": {"d_model": width, "positions": "rope", **PINNED},
                },
                {
                    "id": "c1",
                    "type": "coding",
                    "bases": [{"base": "T", "kind": kind}, {"base": "A", "kind": "mlp"}],
                },
            ]
        }
    )


# -- the ladder of one elite ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["attention", "mamba", "gru"])
def test_the_compact_ladder_spans_the_least_a_fit_accepts(kind: str) -> None:
    design = Design.of(_genome(kind), PINNED, kind)
    sizes = compact_sizes(design, "both")
    assert len(sizes) == 4 and sizes == sorted(set(sizes))
    assert math.log10(sizes[-1] / sizes[0]) >= MIN_DECADES
    smallest = min(
        account(g).non_embedding_params for s in design.shapes("both") if (g := design.genome(s)) is not None
    )
    assert sizes[0] == smallest  # it starts at the design's smallest valid model
    # every size is a model of the axis (the plan's strict match accepts them as they are)
    found = set()
    for s in design.shapes("both"):
        g = design.genome(s)
        if g is not None:
            found.add(account(g).non_embedding_params)
        if g is not None and account(g).non_embedding_params >= sizes[-1]:
            break
    assert set(sizes) <= found


def test_the_extrapolated_loss_is_the_fitted_curve_with_a_bootstrap_interval() -> None:
    rng = np.random.default_rng(3)
    n = np.repeat([1e4, 4e4, 1.6e5, 6.4e5], 2)
    e, a, alpha = 1.2, 30.0, 0.3
    loss = e + a * n**-alpha + rng.normal(0, 0.005, n.size)
    fit = fit_power_law(n, loss, seeds=list(range(n.size)), n_boot=400)
    estimate, low, high = extrapolate(fit, 1e7)
    assert estimate == pytest.approx(fit.E + fit.A * 1e7**-fit.alpha)
    assert low < estimate < high
    assert low <= e + a * 1e7**-alpha <= high  # the truth, for this draw
    wider = extrapolate(fit, 1e9)  # further out, less known
    assert wider[2] - wider[1] > high - low


class _Candidate:
    def __init__(self, id: int, quality: float, params: int) -> None:
        self.id, self.metrics = id, {"quality": quality, "params": params}
        self.status, self.violation = "ok", None
        self.genome = type("G", (), {"id": f"g{id}"})()


def test_the_elite_is_the_front_then_the_next_best_by_quality_above_the_floor() -> None:
    pop = [
        _Candidate(1, 0.02, 10),
        _Candidate(2, 0.6, 500),
        _Candidate(3, 0.3, 100),
        _Candidate(4, 0.9, 900),
        _Candidate(5, 0.5, 800),  # dominated by 2
        _Candidate(6, 0.7, 2000),  # dominated by 4
    ]
    failed = _Candidate(7, 0.95, 10)
    failed.status = "timeout"
    assert [c.id for c in elite_of([*pop, failed], 0.05, 10)] == [4, 2, 3, 6, 5]  # 0.02: under the floor
    assert [c.id for c in elite_of(pop, 0.05, 4)] == [4, 2, 3, 6]
    assert [c.id for c in elite_of(pop, None, 10)] == [4, 2, 3, 1, 6, 5]  # the whole front first
    assert [c.id for c in elite_of([pop[0]], 0.05, 2)] == [1]  # none clears it: the front
    assert RunConfig().ladder_elites == 8  # enough for an interval on the transfer (6 or more)


# -- the store -------------------------------------------------------------------------------
def test_ladder_rows_replace_an_earlier_attempt_and_stay_out_of_the_fidelity_transfer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    config = RunConfig(population=2, generations=0, task="compression", min_steps=0)
    with Store(url) as store:
        run = store.create_run(config.to_dict(), seed=0, task="compression")
        from dogma_evolve.store import IndividualIn, by_slot

        g = _genome("attention")
        store.commit_generation(
            run,
            0,
            genomes=[(g.id, g.to_yaml(), g.sequence_view())],
            individuals=[IndividualIn(0, g.id, 1, None, {})],
            members=[by_slot(0)],
        )
        (ind,) = store.individuals(run)
        t = TransferIn("search", "ladder@1e+06", 3, 0.5)
        store.put_ladder(run, 0, [LadderRankIn(ind.id, 1e6, loss=2.0, rank=1)], [t])
        store.put_ladder(run, 0, [LadderRankIn(ind.id, 1e6, loss=1.5, rank=1)], [t])  # a retry
        (row,) = store.ladder(run)
        assert (row.loss, row.rank, row.generation) == (1.5, 1, 0)
        assert [x.lower_fidelity for x in store.transfer(run)] == ["search"]
        with pytest.raises(StoreError):
            store.put_ladder(run, 0, [LadderRankIn(ind.id + 99, 1e6)])
        with pytest.raises(StoreError):
            store.put_ladder(run, 0, [LadderRankIn(ind.id, 1e6, loss=math.nan)])
        from dogma_evolve.evolution.spaces.registry import SPACES
        from dogma_evolve.evolution.transfer_audit import run_transfer

        space = SPACES["dogma"].from_config(config)
        assert run_transfer(store, run, config, space) == []  # the ladder's rows are not steps


def test_ladder_options_are_checked_in_one_line() -> None:
    with pytest.raises(ValueError, match="1.5 decades"):
        RunConfig(ladder=True, ladder_sizes=("1e4", "2e4", "4e4", "8e4"))
    with pytest.raises(ValueError, match="not a number"):
        RunConfig(ladder=True, ladder_sizes=("1e4", "x", "4e5", "8e5"))
    with pytest.raises(ValueError, match="target_params"):
        RunConfig(ladder=True, target_params=0)
    with pytest.raises(ValueError, match="ladder_tokens_per_param"):
        RunConfig(ladder=True, ladder_tokens_per_param=0)
    assert RunConfig(ladder=True, ladder_sizes=("1e4", "4e4", "1.6e5", "6.4e5")).ladder_sizes is not None
    with pytest.raises(ValueError, match="nb201 space"):
        RunConfig(ladder=True, space="nb201")


# -- the command line ------------------------------------------------------------------------
ALPHAS = {"attention": 0.45, "gru": 0.15}  # attention scales better, gru searches better


def _table(request: EvalRequest) -> dict[str, Any]:
    genome = Genome.from_yaml(request.genome_yaml)
    n = account(genome).non_embedding_params
    kinds = {b.gene.kind for r in genome.regions for b in r.bases}
    family = "attention" if "attention" in kinds else "gru"
    if request.task.startswith("bytelm"):  # the ladder: a known power law per family
        wobble = ((request.seed % 997) / 997 - 0.5) * 0.002
        return {"loss": 1.0 + 40.0 * n ** -ALPHAS[family] + wobble, "params": n}
    quality = 0.8 if family == "gru" else 0.5  # the search prefers gru at its tiny size
    return {"quality": quality, "accuracy": quality, "params": n, "loss": 1 - quality}


@pytest.fixture
def table_pool(monkeypatch: pytest.MonkeyPatch) -> TableEvaluator:
    """Every evaluation of `evolve run` answered by `_table` (no training)."""
    pool = TableEvaluator(_table)
    monkeypatch.setattr(study_running, "pool_for", lambda engine, store: nullcontext(pool))
    return pool


def _ladder_run(population: int, db: str) -> list[str]:
    """`evolve run` argv of a generation-0 run on the compression task with a ladder of its
    whole population."""
    argv = ["run", "--population", str(population), "--generations", "0", "--task", "compression"]
    argv += ["--min-steps", "0", "--objectives", "quality", "--ladder", "--ladder-elites", str(population)]
    return argv + ["--store", db]


def test_run_ladder_ranks_the_elite_by_extrapolated_loss_and_resumes(
    tmp_path: Path, table_pool: TableEvaluator
) -> None:
    pool = table_pool
    db = f"sqlite:///{tmp_path / 'run.db'}"
    code, out, err = _evolve(*_ladder_run(2, db), "--json")
    assert code == 0, err
    data = json.loads(out)
    ladder = data["ladder"]
    fitted = [r for r in ladder if r["loss"] is not None]
    assert fitted, ladder
    assert [r["rank"] for r in fitted] == list(range(1, len(fitted) + 1))  # the unfitted go last
    assert [r["loss"] for r in fitted] == sorted(r["loss"] for r in fitted)
    assert all(r["note"] for r in ladder if r["loss"] is None)
    for r in fitted:
        assert r["loss_low"] <= r["loss"] <= r["loss_high"]
        assert r["alpha_low"] <= r["alpha"] <= r["alpha_high"]
    names = {(t["lower_fidelity"], t["higher_fidelity"]) for t in data["ladder_transfer"]}
    assert ("search", "ladder@1e+06") in names
    trained = pool.requests

    # report and audit show it; a resumed run trains nothing again
    code, out, _ = _evolve("report", "--store", db, "--json")
    assert json.loads(out)["ladder"] == data["ladder"]
    code, text, _ = _evolve("report", "--store", db)
    assert "ladder: the elite ranked by loss extrapolated to 1,000,000 non-embedding parameters" in text
    assert "regime: scaling law along D = 5·N (non-embedding N)" in text
    page = tmp_path / "report.html"
    code, _, err = _evolve("report", "--store", db, "--html", str(page))
    assert code == 0, err
    text = page.read_text()
    assert "Size ladder" in text and f"individual {fitted[0]['individual_id']} (search quality" in text
    code, out, _ = _evolve("audit", str(ladder[0]["individual_id"]), "--store", db, "--json")
    assert json.loads(out)["ladder"]["rank"] == 1
    code, out, err = _evolve("run", "--resume", data["run_id"], "--store", db, "--json")
    assert code == 0, err
    assert pool.requests == trained and json.loads(out)["ladder"] == data["ladder"]


def test_a_ladder_that_cannot_fit_is_kept_unranked_with_its_reason() -> None:
    from dogma_evolve.evolution.scale.search_ladder import EliteLadder, rank_elite

    class _Plan:
        points: list[Any] = []
        budgets = [type("B", (), {"per_param": None})()]
        source, run_id = "individual 7", None

    elite = EliteLadder(7, 0.5, _Plan())  # type: ignore[arg-type]  # no point trained
    assert rank_elite([elite], 1e6) == [None]
    assert elite.note.startswith("individual 7:") and elite.loss is None and elite.fit is None


def test_the_ladder_regime_comes_from_the_run_budget(tmp_path: Path) -> None:
    from dogma_evolve.evolution.scale.ladder_report import regime_of

    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Store(url) as store:
        fixed = RunConfig(ladder=True, ladder_tokens=200_000, task="compression").to_dict()
        per_param = RunConfig(ladder=True, task="compression").to_dict()
        old = {k: v for k, v in fixed.items() if k != "ladder_tokens_per_param"}  # a run of before
        runs = [store.create_run(c, seed=0, task="compression") for c in (fixed, per_param, old)]
        texts = [regime_of(store, r) or "" for r in runs]
    assert "fixed-data ladder" in texts[0] and "not a scaling law" in texts[0]
    assert texts[1].startswith("scaling law along D = 5·N") and texts[2] == texts[0]


def test_the_verdict_says_plainly_whether_the_search_order_held() -> None:
    from dogma_evolve.evolution.scale.ladder_report import verdict

    def row(rho: float | None, low: float | None, high: float | None, n: int = 8) -> dict[str, Any]:
        return {"spearman": rho, "spearman_low": low, "spearman_high": high, "n": n}

    assert verdict(row(0.8, 0.4, 0.95)).startswith("the search's order held at scale: Spearman ρ 0.80")
    assert verdict(row(-0.7, -0.9, -0.2)).startswith("the search's order reversed at scale")
    text = verdict(row(0.3, -0.4, 0.8))
    assert "did not demonstrably hold" in text and "includes 0" in text and "--select-by ladder" in text
    assert "not determined" in verdict(row(0.9, None, None, 5)) and "needs 6" in verdict(
        row(0.9, None, None, 5)
    )
    assert "not determined" in verdict(row(None, None, None, 2))
    assert verdict(None) is None


def test_select_by_ladder_makes_the_ladders_rank_1_the_runs_best(
    tmp_path: Path, table_pool: TableEvaluator
) -> None:
    from dogma_evolve.evolution.report.summary import best_individual

    db = f"sqlite:///{tmp_path / 'sel.db'}"
    argv = _ladder_run(4, db)
    with pytest.raises(SystemExit) as exit_info:  # argparse's choices
        _evolve(*argv, "--select-by", "nonsense")
    assert exit_info.value.code == 2
    no_ladder = [a for a in argv if a != "--ladder"]
    code, _, err = _evolve(*no_ladder, "--select-by", "ladder")
    assert code == 2 and "--select-by ladder needs --ladder" in err and err.count("\n") == 1
    code, out, err = _evolve(*argv, "--select-by", "ladder", "--json")
    assert code == 0, err
    data = json.loads(out)
    first = next(r for r in data["ladder"] if r["rank"] == 1)
    assert data["selected_by"] == "ladder" and data["best"]["id"] == first["individual_id"]
    with Store(db, create=False) as store:
        assert best_individual(store, data["run_id"]).id == first["individual_id"]
    code, text, _ = _evolve("report", "--store", db)
    assert "verdict: the search's order" in text
