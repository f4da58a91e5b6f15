"""`evolve scale TARGET`: ladders of one design, trained through the store, fitted.

Most tests train nothing: the pool is a table whose loss is a known power law in the
parameters (and tokens), so the command's planning, store bookkeeping, resumption and fits
are checked in seconds. One test, marked slow, trains a real ladder on Ray end to end.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.evaluation.protocol import OnResult
from dogma_evolve.evaluation.scaling import LadderError
from dogma_evolve.evaluation.table import InProcessPool, TableEvaluator
from dogma_evolve.evolution.cli import scale as scale_cli
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.engine import Engine
from dogma_evolve.evolution.scale import pace
from dogma_evolve.evolution.scale import train as scale
from dogma_evolve.evolution.scale.ladder import Design, Shape, ladder
from dogma_evolve.genome import Genome, load_genome
from dogma_evolve.phenotype import account
from dogma_evolve.store import Store
from tests.in_process import evolve_in_process as evolve

PINNED = {"vocab": 257, "max_len": 64}  # bytelm's
SIZES = "8k,25k,80k,400k"
E, A, ALPHA = 1.5, 40.0, 0.35
GENOME = {  # a gated attention + swiglu stack under a promoter, and a mamba region
    "regions": [
        {"id": "s0", "type": "structural", "settings": {"d_model": 64, "positions": "rope", **PINNED}},
        {
            "id": "r1",
            "type": "regulatory",
            "bases": [{"base": "C", "kind": "gate", "params": {"hidden": 16}}],
        },
        {"id": "p1", "type": "promoter", "settings": {"copies": 2}},
        {
            "id": "c1",
            "type": "coding",
            "bases": [
                {"base": "T", "kind": "attention", "params": {"heads": 4, "kv_heads": 2}},
                {"base": "A", "kind": "swiglu"},
            ],
        },
        {
            "id": "c2",
            "type": "coding",
            "bases": [{"base": "T", "kind": "mamba"}, {"base": "A", "kind": "mlp"}],
        },
    ],
    "edges": [{"source": "r1", "target": "c1", "kind": "activates"}],
}


def law(request: Any) -> dict[str, Any]:
    """A known loss: E + A·N^-α + 30·D^-0.3, plus a small deterministic per-seed wobble."""
    n = account(Genome.from_yaml(request.genome_yaml)).non_embedding_params
    d = request.fidelity * 32 * 64
    wobble = ((request.seed % 1009) / 1009 - 0.5) * 0.004
    loss = E + A * n**-ALPHA + 30.0 * d**-0.3 + wobble
    # the precision trained in, recorded as a real evaluation records it (the cache keys on it)
    return {"loss": loss, "params": n, "steps": request.fidelity, "precision": request.precision}


class LawPool(TableEvaluator):
    """The table pool with the known law; counts requests; can stop like a killed command."""

    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__(law)
        self.stop_after = stop_after

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: OnResult | None = None
    ) -> list[EvalResult]:
        def counted(result: EvalResult) -> None:
            if on_result is not None:
                on_result(result)
            if self.stop_after is not None and self.requests >= self.stop_after:
                raise KeyboardInterrupt

        return super().evaluate(requests, counted)


class Pools:
    """Stands for `scale_cli._pool`: every pool `evolve scale` opens, in `made`."""

    def __init__(self) -> None:
        self.made: list[LawPool] = []
        self.stop_after: int | None = None  # the next pools stop after this many results

    def __call__(self, args: Any, store: Any, todo: Any) -> LawPool:
        self.made.append(LawPool(self.stop_after))
        return self.made[-1]


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> Pools:
    fake = Pools()
    monkeypatch.setattr(scale_cli, "_pool", fake)
    return fake


def paced(seconds_per_step_per_1m: float) -> type:
    """Stands for `pace.SideBySide` (the default budget's probe): a pace proportional to the
    rung's non-embedding parameters, nothing trained."""

    class Fake:
        def __init__(self, copies: int, threads: int, plugins: Any = ()) -> None:
            pass

        def __call__(self, genome: Genome, task: str) -> pace.Pace:
            return pace.Pace(0.0, seconds_per_step_per_1m * account(genome).non_embedding_params / 1e6)

        def close(self) -> None:
            pass

    return Fake


@pytest.fixture(autouse=True)
def quick_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 ms a step per 1M parameters: every default ladder fits the time budget."""
    monkeypatch.setattr(pace, "SideBySide", paced(1e-3))


def rows(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as c:
        return int(c.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])


def design(source: str = "preset:gpt2-small") -> Design:
    if source.startswith("preset:"):
        return Design.of(load_genome(source), PINNED, source, preset=True)
    return Design.of(Genome.from_dict(GENOME), PINNED, source)


# -- ladders ---------------------------------------------------------------------------------
def test_a_genome_at_its_own_shape_is_unchanged():
    genome = Genome.from_dict(GENOME)
    d = design("file.yaml")
    assert (d.width, d.depth) == (64, 2) and d.base == Shape(64, 2)
    assert d.genome(Shape(64, 2)) == genome
    wider = d.genome(Shape(128, 2))
    assert wider is not None and wider.structural["d_model"] == 128
    c1 = wider.region("c1").bases
    assert c1[0].gene.get("heads") == 4 and c1[0].gene.get("head_dim") == 32  # its share of d_model
    assert c1[1].gene.get("hidden") == 344  # swiglu's rule at 128, as at 64 (176)
    deeper = d.genome(Shape(64, 6))
    assert deeper is not None
    copies = {r.id: deeper.promoter_of(r.id)["copies"] for r in deeper.regions if r.type == "coding"}
    assert copies == {"c1": 6, "c2": 3}  # the deepest region to 6, the other in proportion


@pytest.mark.parametrize("axis", ["both", "width", "depth", "copies"])
@pytest.mark.parametrize("source", ["preset:gpt2-small", "preset:mamba-130m", "file.yaml"])
def test_default_ladders_span_the_decades(axis, source):
    d = design(source)
    rungs = ladder(d, axis, None)
    ps = [r.params for r in rungs]
    assert len(rungs) >= 4 and all(b > a for a, b in zip(ps, ps[1:], strict=False))
    assert math.log10(ps[-1] / ps[0]) >= 1.5
    assert all(account(r.genome).non_embedding_params == r.params for r in rungs)
    if axis == "width":
        assert {r.shape.depth for r in rungs} == {d.base.depth}
    if axis in ("depth", "copies"):
        assert {r.shape.width for r in rungs} == {d.base.width}
    assert all(r.genome.structural["vocab"] == 257 and r.genome.structural["max_len"] == 64 for r in rungs)


def test_sizes_reach_billions_for_a_cluster():
    rungs = ladder(design(), "both", [1e7, 1e8, 1e9, 1e10])
    for r, target in zip(rungs, [1e7, 1e8, 1e9, 1e10], strict=True):
        assert abs(math.log(r.params / target)) < math.log(1.3)
    assert rungs[-1].shape.depth > 12  # depth grows with width, past the preset's own 12


def test_refusals_are_one_line():
    with pytest.raises(LadderError, match="3 sizes"):
        ladder(design(), "both", [1e4, 1e5, 1e6])
    with pytest.raises(LadderError, match="span 1.00 decades"):
        ladder(design(), "both", [1e4, 2e4, 5e4, 1e5])
    with pytest.raises(LadderError, match="no regulatory region"):
        ladder(design(), "regulatory", None)
    with pytest.raises(
        LadderError, match="regulatory axis of file.yaml gives"
    ):  # a gate cannot span 1.5 decades
        ladder(design("file.yaml"), "regulatory", None)
    with pytest.raises(LadderError, match="at least 2 seeds"):
        scale.make_plan(design(), "both", "bytelm", None, [scale.Budget(per_param=20)], 1)


def test_points_train_tokens_in_proportion_to_non_embedding_parameters():
    plan = scale.make_plan(design(), "both", "bytelm_en", None, [scale.Budget(per_param=20)], 2)
    assert plan.tokens_per_step == 32 * 64 and len(plan.points) == 2 * len(plan.rungs)
    for p in plan.points:
        assert p.steps == max(1, round(20 * p.params / 2048)) and p.tokens == p.steps * 2048
        assert p.params < p.total_params  # N leaves out the embedding and head
    first, second = plan.points[:2]
    assert first.seed == scale.seed_of(first.genome_id, "bytelm_en", 0) != second.seed


# -- the command, with the known law -----------------------------------------------------------
def test_fewer_than_four_sizes_exit_2_before_a_store_exists(tmp_path):
    db = tmp_path / "never.db"
    for argv in (
        ["--sizes", "1e4,1e5,1e6"],
        ["--sizes", SIZES, "--seeds", "1"],
        ["--sizes", "1e4,2e4,5e4,1e5"],
        ["--axis", "regulatory"],
        ["--tokens", "0"],
        ["--timeout", "-1"],
    ):
        code, out, err = evolve("scale", "preset:gpt2-small", *argv, "--store", f"sqlite:///{db}")
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("evolve: error: "), err
    with pytest.raises(SystemExit) as exit_info:  # argparse's own refusal: usage, then the reason
        evolve("scale", "preset:gpt2-small", "--sizes", "10q,1e5", "--store", f"sqlite:///{db}")
    assert exit_info.value.code == 2
    assert not db.exists()


def test_a_ladder_is_a_run_and_a_second_invocation_trains_nothing(tmp_path, pools):
    db = tmp_path / "s.db"
    argv = ["scale", "preset:gpt2-small", "--sizes", SIZES, "--tokens", "200k", "--seeds", "2"]
    code, out, err = evolve(*argv, "--json", "--store", f"sqlite:///{db}")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["points"]) == 8 and data["trained"] == 8 and pools.made[0].requests == 8
    for p in data["points"]:
        assert {"params", "tokens", "seed", "loss"} <= set(p) and p["status"] == "ok"
        assert p["tokens"] == 98 * 2048  # 200k tokens: 98 steps of 32 x 64
    assert {p["params"] for p in data["points"]} == {r["params"] for r in data["rungs"]}
    fit = data["fit"]
    assert {"E", "A", "alpha", "alpha_ci", "residual"} <= set(fit)
    assert fit["alpha_ci"][0] <= ALPHA <= fit["alpha_ci"][1] and abs(fit["alpha"] - ALPHA) < 0.05
    assert len(fit["residuals"]) == 8 and fit["residual"] < 0.01
    assert "[8/8]" in err  # a progress line per point, on stderr
    with Store(f"sqlite:///{db}", create=False) as store:
        run = store.get_run(data["run_id"])
        assert run is not None and run.kind == "scale" and run.status == "finished"
        assert run.evaluated == 8
        ev = store.find_evaluation(data["points"][0]["genome_id"], "bytelm_en", 98, data["points"][0]["seed"])
        assert ev is not None and ev.run_id == data["run_id"] and ev.individual_id is not None
    before = rows(db)
    code, out, _ = evolve(*argv, "--json", "--store", f"sqlite:///{db}")
    again = json.loads(out)
    assert code == 0 and again["trained"] == 0 and len(pools.made) == 1  # no pool opened
    assert rows(db) == before and again["run_id"] == data["run_id"]
    assert again["fit"] == fit and {p["origin"] for p in again["points"]} == {"stored"}
    code, text, _ = evolve(*argv, "--store", f"sqlite:///{db}")  # the table
    assert code == 0 and "L(N) at fixed data (not a scaling law)" in text and "fixed-data ladder" in text
    top = data["rungs"][-1]
    assert f"{top['params']:,}" in text and f"{top['total_params']:,}" in text  # N and total
    code, out, _ = evolve("runs", "--json", "--store", f"sqlite:///{db}")
    assert json.loads(out)[0]["strategy"] == "scale"
    code, _, err = evolve("run", "--resume", data["run_id"], "--store", f"sqlite:///{db}")
    assert code == 2 and "evolve scale ladder" in err


def test_a_killed_ladder_resumes_without_retraining(tmp_path, pools):
    db = tmp_path / "k.db"
    argv = ["scale", "preset:gpt2-small", "--sizes", SIZES, "--tokens", "200k", "--json"]
    pools.stop_after = 3
    code, _, err = evolve(*argv, "--store", f"sqlite:///{db}")
    assert code == 130 and "interrupted" in err
    assert rows(db) == 3
    with Store(f"sqlite:///{db}", create=False) as store:
        (run,) = store.list_runs()
        assert run.status == "failed" and run.last_generation == 2  # one generation per point
    pools.stop_after = None
    code, out, _ = evolve(*argv, "--store", f"sqlite:///{db}")
    data = json.loads(out)
    assert code == 0 and data["trained"] == 5 and pools.made[-1].requests == 5 and rows(db) == 8
    assert sorted(p["origin"] for p in data["points"]) == ["stored"] * 3 + ["trained"] * 5
    # another ladder over the same points (3 seeds: a new run) copies them instead of training
    code, out, _ = evolve(*argv, "--seeds", "3", "--store", f"sqlite:///{db}")
    data = json.loads(out)
    assert code == 0 and data["trained"] == 4 and pools.made[-1].requests == 4
    assert sorted(p["origin"] for p in data["points"]) == ["copied"] * 8 + ["trained"] * 4


def test_a_ladder_copies_no_row_of_another_precision(tmp_path, pools, monkeypatch):
    """Rows trained in fp32 (auto on a CPU the probe keeps in fp32) are not lent to a ladder
    that trains in bf16 (here: auto where CUDA is seen), which trains every point itself."""
    import dogma_evolve.evolution.scale.train as scale_train
    import dogma_evolve.evolution.training_run as training_run

    db = tmp_path / "p.db"
    argv = ["scale", "preset:gpt2-small", "--sizes", SIZES, "--tokens", "200k", "--json"]
    monkeypatch.setattr(scale_train, "pool_precision", lambda precision, pool: "fp32")
    code, out, _ = evolve(*argv, "--store", f"sqlite:///{db}")
    assert code == 0 and json.loads(out)["trained"] == 8
    monkeypatch.setattr(scale_train, "pool_precision", lambda precision, pool: "bf16")
    sent: list[EvalRequest] = []

    def request(**fields: Any) -> EvalRequest:
        sent.append(EvalRequest(**fields))
        return sent[-1]

    monkeypatch.setattr(training_run, "EvalRequest", request)  # where recorders build them
    code, out, _ = evolve(*argv, "--seeds", "3", "--store", f"sqlite:///{db}")
    data = json.loads(out)
    assert code == 0 and data["trained"] == 12 and pools.made[-1].requests == 12
    assert len(sent) == 12 and {r.precision for r in sent} == {"bf16"}


def test_a_genome_file_against_a_preset(tmp_path, pools):
    path = tmp_path / "mine.yaml"
    path.write_text(Genome.from_dict(GENOME).to_yaml())
    db = f"sqlite:///{tmp_path / 'a.db'}"
    code, out, err = evolve(
        "scale",
        str(path),
        "--against",
        "preset:gpt2-small",
        "--tokens-per-param",
        "2",
        "--json",
        "--store",
        db,
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["target"] == str(path) and data["other"]["target"] == "preset:gpt2-small"
    assert len(data["points"]) == len(data["other"]["points"]) == 2 * len(data["rungs"])
    for mine, theirs in zip(data["rungs"], data["other"]["rungs"], strict=True):  # matched sizes
        assert abs(math.log(mine["params"] / theirs["params"])) < math.log(2)
    c = data["comparison"]
    assert {"other_fit", "beta", "loss_gap", "crossover_params"} <= set(c)
    assert c["other_fit"] == data["other"]["fit"] and c["basis"] == {"tokens_per_param": 2.0}
    assert c["other_fit"]["tokens_per_param"] == 2.0 and data["other"]["run_id"] != data["run_id"]
    code, text, _ = evolve(
        "scale", str(path), "--against", "preset:gpt2-small", "--tokens-per-param", "2", "--store", db
    )
    assert code == 0 and "at matched compute" in text and "sample-efficiency factor" in text
    code, _, err = evolve(
        "scale", str(path), "--against", str(path), "--tokens-per-param", "2", "--store", db
    )
    assert code == 2 and "same ladder" in err


def test_against_with_default_sizes_takes_the_nearest_models_of_the_other_axis(tmp_path, pools):
    db = f"sqlite:///{tmp_path / 'v.db'}"
    code, out, err = evolve(
        "scale", "preset:gpt2-small", "--against", "preset:mamba-130m", "--json", "--store", db
    )
    assert code == 0, err
    data = json.loads(out)
    mine, theirs = ([r["params"] for r in d["rungs"]] for d in (data, data["other"]))
    assert len(theirs) >= 4 and math.log10(theirs[-1] / theirs[0]) >= 1.5
    lo, hi = data["comparison"]["params_range"]
    assert lo == max(mine[0], theirs[0]) and hi == min(mine[-1], theirs[-1])
    for d in (data, data["other"]):  # 20 tokens per parameter, within 4 passes over the text
        assert d["regime"]["scaling_law"] and d["regime"]["max_epochs"] <= 4


def test_the_default_budget_lowers_the_tokens_and_a_rerun_resumes_its_ladder(tmp_path, pools, monkeypatch):
    argv = ["scale", "preset:gpt2-small", "--sizes", SIZES, "--json", "--workers", "1"]
    code, out, err = evolve(*argv, "--minutes", "0", "--store", f"sqlite:///{tmp_path / 'free.db'}")
    assert code == 0, err  # no budget: 20 tokens per parameter, no probe
    free = json.loads(out)
    assert free["default_budget"] is None and free["budgets"] == [{"tokens_per_param": 20.0}]

    monkeypatch.setattr(pace, "SideBySide", paced(1e3))
    budget = sum(p["steps"] * 1e3 * p["params"] / 1e6 for p in free["points"]) / 60 / 3  # a third of 20's
    db = f"sqlite:///{tmp_path / 'm.db'}"
    code, out, err = evolve(*argv, "--minutes", f"{budget:g}", "--store", db)
    assert code == 0, err
    data = json.loads(out)
    chosen = data["default_budget"]
    assert (
        chosen["tokens_per_param"] == 5.0 and chosen["projected_s"] <= 60 * budget and not chosen["resumed"]
    )
    assert [p["tokens_per_param"] for p in chosen["projections"]] == [20, 10, 5] and data["budgets"] == [
        {"tokens_per_param": 5.0}
    ]
    assert [r["params"] for r in data["rungs"]] == [r["params"] for r in free["rungs"]]  # the same sizes
    assert data["regime"]["name"] == "proportional" and data["trained"] == 8
    assert "budget: 5 tokens per parameter (not 20)" in err
    monkeypatch.setattr(pace, "SideBySide", None)  # a rerun finds its ladder in the store: no probe
    code, out, err = evolve(*argv, "--store", db)
    again = json.loads(out)
    assert code == 0 and again["run_id"] == data["run_id"] and again["trained"] == 0
    assert again["default_budget"]["resumed"] and again["default_budget"]["tokens_per_param"] == 5.0
    cluster = ["--ray-address", "127.0.0.1:6379", "--store", f"sqlite:///{tmp_path / 'c.db'}"]
    code, out, err = evolve(*argv, *cluster)  # a cluster's pace is not this machine's: 20, unprobed
    assert code == 0, err
    assert json.loads(out)["default_budget"] is None and json.loads(out)["budgets"] == [
        {"tokens_per_param": 20.0}
    ]
    code, _, err = evolve(*argv, "--minutes", "-1", "--store", db)
    assert code == 2 and err.count("\n") == 1 and "--minutes" in err


def test_several_token_budgets_fit_the_loss_surface(tmp_path, pools):
    db = f"sqlite:///{tmp_path / 'd.db'}"
    code, out, err = evolve(
        "scale", "preset:gpt2-small", "--sizes", SIZES, "--tokens", "50k,200k,800k", "--json", "--store", db
    )
    assert code == 0, err
    data = json.loads(out)
    assert len(data["points"]) == 4 * 3 * 2 and len(data["fits"]) == 3
    surface = data["surface"]
    assert "refused" not in surface, surface
    assert abs(surface["alpha"] - ALPHA) < 0.05 and abs(surface["beta"] - 0.3) < 0.05


def test_an_individual_of_a_run_as_target(tmp_path, pools):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    with Store(db) as store:
        config = RunConfig(population=2, generations=0, steps=2, task="bytelm", max_params=100_000, seed=1)
        engine = Engine(config, store, InProcessPool())
        engine.run()
        record = store.individuals(engine.run_id)[0]
    results = []
    for target in (str(record.id), record.genome_id[:10]):  # its id, its genome-id prefix
        code, out, err = evolve("scale", target, "--tokens", "100k", "--json", "--store", db)
        assert code == 0, err
        results.append(json.loads(out))
        assert results[-1]["genome_id"] == record.genome_id and len(results[-1]["points"]) >= 8
    first, second = results
    assert first["target"] == f"individual {record.id}" and first["trained"] == len(first["points"])
    assert second["run_id"] == first["run_id"] != engine.run_id and second["trained"] == 0  # one ladder
    code, _, err = evolve("scale", "999999", "--store", db)
    assert code == 2 and "no individual" in err
    code, _, err = evolve("scale", "123", "--store", f"sqlite:///{tmp_path / 'none.db'}")
    assert code == 2 and err.count("\n") == 1


# -- real training -----------------------------------------------------------------------------
@pytest.mark.slow
def test_a_real_ladder_end_to_end(tmp_path):
    """8 real trainings on Ray (60 steps each, 3k to 160k non-embedding parameters: the
    preset's smallest model and up 1.7 decades, a third of the compute of SIZES' 13k to 460k)."""
    db = tmp_path / "real.db"
    argv = ["scale", "preset:gpt2-small", "--sizes", "4k,12k,40k,130k", "--tokens", "122880", "--seeds", "2"]
    code, out, err = evolve(*argv, "--workers", "1", "--json", "--store", f"sqlite:///{db}")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["points"]) == 8 and data["trained"] == 8
    assert all(p["status"] == "ok" and p["steps"] == 60 and math.isfinite(p["loss"]) for p in data["points"])
    assert all(p["lr"] == pytest.approx(min(0.03, 0.64 / p["width"])) for p in data["points"])
    assert data["fit"]["alpha"] > 0 and data["fit"]["alpha_ci"][0] <= data["fit"]["alpha"]
    smallest, largest = data["points"][0], data["points"][-1]
    assert largest["loss"] < smallest["loss"]  # the largest model learns more from the same tokens
    before = rows(db)
    code, out, _ = evolve(*argv, "--json", "--store", f"sqlite:///{db}")
    assert code == 0 and json.loads(out)["trained"] == 0 and rows(db) == before == 8
