"""`evolve ablate ID`: the changes a genome is ablated by, the statistics of their effects, and
the command end to end on a tiny run (real trainings of 2 steps, in process; one slow test on
Ray), including a killed ablation that resumes without retraining."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dogma_evolve.evaluation import EvalRequest, evaluate
from dogma_evolve.evaluation.tasks import derive_seed, get_task
from dogma_evolve.evolution.ablate import ablation as ablate
from dogma_evolve.evolution.ablate import stats as ablate_stats
from dogma_evolve.evolution.ablate.changes import (
    MATCH_TOLERANCE,
    attention_options,
    block_params,
    derive_changes,
    nearest,
    normalise,
)
from dogma_evolve.evolution.cli import ablate as ablate_cli
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import account
from dogma_evolve.store import EvaluationIn, IndividualIn, Store, by_slot
from tests.evolution.stopping_pools import Pools
from tests.in_process import evolve_in_process as evolve

STRUCTURAL = {"d_model": 64, "vocab": 64, "max_len": 64, "positions": "rope"}
GENOME = {  # gated attention + swiglu under a promoter, dna + tetra_reach + mlp, a looped mamba
    "regions": [
        {"id": "s0", "type": "structural", "settings": STRUCTURAL},
        {"id": "r1", "type": "regulatory", "bases": [{"base": "C", "kind": "gate"}]},
        {"id": "p1", "type": "promoter", "settings": {"copies": 2}},
        {
            "id": "c1",
            "type": "coding",
            "bases": [{"base": "T", "kind": "attention"}, {"base": "A", "kind": "swiglu"}],
        },
        {
            "id": "c2",
            "type": "coding",
            "bases": [
                {"base": "T", "kind": "dna"},
                {"base": "A", "kind": "tetra_reach"},
                {"base": "A", "kind": "mlp"},
            ],
        },
        {"id": "c3", "type": "coding", "bases": [{"base": "T", "kind": "mamba"}]},
    ],
    "edges": [
        {"source": "r1", "target": "c1", "kind": "activates"},
        {"source": "c1", "target": "c3", "kind": "loop"},
    ],
}


def by_name(genome: Genome) -> dict[str, Any]:
    return {c.name: c for c in derive_changes(genome)}


# -- the changes -----------------------------------------------------------------------------
def test_every_module_has_its_change_and_every_genome_validates():
    base = Genome.from_dict(GENOME)
    changes = by_name(base)
    assert list(changes) == [
        "-gene:c1.T:attention",
        "-gene:c1.A:swiglu",
        "-gene:c2.T:dna",
        "-gene:c2.A:tetra_reach",
        "-gene:c2.A:mlp",
        "-gene:c3.T:mamba",
        "-edge:r1>c1",
        "-edge:c1>c3",
        "-regulation",
        "c1:x2→x1",
        "c2.dna.pathA:min",
        "c2.dna.pathB:min",
        "c2.dna.pathC:min",
        "c2.dna.pathD:min",
        "c2.dna→gru",
        "c2.tetra_reach→attention",
    ]
    for c in changes.values():
        assert c.genome is not None, (c.name, c.reason)
        assert Genome.from_yaml(c.genome.to_yaml()) == c.genome and c.genome.id != base.id
    assert len({c.genome.id for c in changes.values()}) == len(changes)
    # a region's only gene goes with its region and the edges that touch it
    no_mamba = changes["-gene:c3.T:mamba"].genome
    assert [r.id for r in no_mamba.regions] == ["s0", "r1", "p1", "c1", "c2"]
    assert [(e.source, e.target) for e in no_mamba.edges] == [("r1", "c1")]
    no_swiglu = changes["-gene:c1.A:swiglu"].genome.region("c1")
    assert [b.gene.kind for b in no_swiglu.bases] == ["attention"]
    assert [r.type for r in changes["-regulation"].genome.regions].count("regulatory") == 0
    assert changes["-regulation"].genome.edges == (base.edges[1],)
    assert changes["c1:x2→x1"].genome.promoter_of("c1")["copies"] == 1
    assert normalise(" c2.dna->gru ") == "c2.dna→gru" and normalise("edge:r1>c1") == "-edge:r1>c1"
    assert normalise("regulation") == normalise("-regulation") == "-regulation"


def test_replacements_are_size_matched():
    """Each replaced block lies within the tolerance of the one it replaces; the accountant of
    the whole model, an independent count, sees exactly that difference."""
    base = Genome.from_dict(GENOME)
    changes = by_name(base)
    dna = base.region("c2").bases[0].gene.as_dict
    assert block_params("dna", dna, base.structural) == changes["c2.dna→gru"].block[0]
    for name in ("c2.dna.pathA:min", "c2.dna.pathB:min", "c2.dna.pathC:min", "c2.dna.pathD:min"):
        before, after = changes[name].block
        assert abs(after - before) <= MATCH_TOLERANCE * before, name
        assert account(changes[name].genome).params - account(base).params == after - before
    for name, kind in (("c2.dna→gru", "gru"), ("c2.tetra_reach→attention", "attention")):
        c = changes[name]
        before, after = c.block
        assert abs(after - before) <= MATCH_TOLERANCE * before, name
        assert account(c.genome).params - account(base).params == after - before
        (gene,) = [b for b in c.genome.region("c2").bases if b.gene.kind == kind]
        assert gene.type == "T"
    path_a = changes["c2.dna.pathA:min"].genome.region("c2").bases[0].gene
    assert path_a.get("reactions") == 1 and path_a.get("width") > 64  # width restores the size
    gru = changes["c2.dna→gru"]
    before, after = gru.block
    hidden = gru.genome.region("c2").bases[0].gene.get("hidden")
    for h in (hidden - 1, hidden + 1):  # the nearest hidden size
        assert abs(block_params("gru", {"hidden": h}, base.structural) - before) >= abs(after - before)


def test_tetra_is_replaced_by_the_attention_nearest_its_size():
    """The volumetric mesh has 3 projections of d × d where attention's default has 4: the
    match takes grouped or narrower heads."""
    doc = {
        "regions": [
            {"id": "s0", "type": "structural", "settings": STRUCTURAL},
            {"id": "c1", "type": "coding", "bases": [{"base": "A", "kind": "tetra"}]},
        ]
    }
    base = Genome.from_dict(doc)
    c = by_name(base)["c1.tetra→attention"]
    assert c.genome is not None, c.reason
    before, after = c.block
    s = base.structural
    assert before == block_params("tetra", base.region("c1").bases[0].gene.as_dict, s)
    assert abs(after - before) <= MATCH_TOLERANCE * before < abs(4 * 64 * 64 - before)
    assert account(c.genome).params - account(base).params == after - before
    others = [block_params("attention", o, s) for o in attention_options(s)]
    assert min(abs(o - before) for o in others) == abs(after - before)


def test_nearest_finds_the_closest_size():
    assert nearest(lambda v: v * v, 50, 1, 100) == 7  # 49
    assert nearest(lambda v: v * v, 57, 1, 100) == 8  # 64 is 7 away, 49 is 8
    assert nearest(lambda v: v * v, 10_000_000, 1, 100) == 100  # the bound
    assert nearest(lambda v: 10 * v, 0, 1, 100) == 1


def test_invalid_repeated_and_unmatched_changes_are_skipped_with_their_reason():
    doc = json.loads(json.dumps(GENOME))
    # c4 shares c3's weights: removing c3's only gene leaves a shares edge to nowhere, fine;
    # but a two-gene region that shares cannot lose a gene (the genes must stay identical)
    doc["regions"] += [
        {
            "id": "c4",
            "type": "coding",
            "bases": [{"base": "T", "kind": "conv"}, {"base": "T", "kind": "conv"}],
        },
        {
            "id": "c5",
            "type": "coding",
            "bases": [{"base": "T", "kind": "conv"}, {"base": "T", "kind": "conv"}],
        },
    ]
    doc["edges"].append({"source": "c4", "target": "c5", "kind": "shares"})
    changes = by_name(Genome.from_dict(doc))
    first = changes["-gene:c4/0.T:conv"]
    assert first.genome is None and first.reason.startswith("invalid genome: ") and "shares" in first.reason
    # without the shares edge the two conv genes are one genome: the second repeats the first
    doc["edges"].pop()
    changes = by_name(Genome.from_dict(doc))
    assert changes["-gene:c4/0.T:conv"].genome is not None
    assert changes["-gene:c4/1.T:conv"].genome is None
    assert changes["-gene:c4/1.T:conv"].reason == "the same genome as -gene:c4/0.T:conv"
    # a cascade of strand displacements (depth) is path A's too: its minimum is one layer
    doc["regions"][4]["bases"][0]["params"] = {"depth": 3}
    path_a = by_name(Genome.from_dict(doc))["c2.dna.pathA:min"].genome.region("c2").bases[0].gene
    assert path_a.get("reactions") == 1 and "depth" not in path_a.as_dict  # depth 1: the default
    # a dna gene whose path A is already at its minimum has nothing to take away there
    doc["regions"][4]["bases"][0]["params"] = {"reactions": 1}
    assert by_name(Genome.from_dict(doc))["c2.dna.pathA:min"].reason == "path A is already at its minimum"


# -- statistics ------------------------------------------------------------------------------
T_2 = 4.302652729911275  # Student t quantile 0.975 at 2 degrees of freedom
T_1 = 12.706204736174698  # at 1


def test_effects_against_a_hand_computation():
    base = [0.5, 0.6, 0.7]
    e = ablate_stats.effects(base)
    half = T_2 * 0.1 / math.sqrt(3)  # s = 0.1
    assert e.mean == pytest.approx(0.6) and e.n == 3 and e.failed == 0
    assert e.ci == pytest.approx((0.6 - half, 0.6 + half))
    change = [0.4, 0.45, 0.65]  # differences -0.1, -0.15, -0.05: mean -0.1, s 0.05
    e = ablate_stats.effects(base, change)
    half = T_2 * 0.05 / math.sqrt(3)
    assert e.mean == pytest.approx(1.5 / 3) and e.delta == pytest.approx(-0.1)
    assert e.ci == pytest.approx((-0.1 - half, -0.1 + half))
    # a failed replicate leaves its pair out: differences -0.1, -0.05
    e = ablate_stats.effects(base, [0.4, None, 0.65])
    half = T_1 * math.sqrt(0.00125) / math.sqrt(2)
    assert (e.n, e.failed) == (2, 1) and e.delta == pytest.approx(-0.075)
    assert e.ci == pytest.approx((-0.075 - half, -0.075 + half)) and e.mean == pytest.approx(0.525)
    # one replicate: a mean, no interval
    e = ablate_stats.effects([0.5], [0.25])
    assert e.delta == pytest.approx(-0.25) and e.ci is None and ablate_stats.t_interval([1.0]) is None


# -- the command on a tiny run ---------------------------------------------------------------
TASK = "mqar"
STEPS = 2


def tiny_genome() -> Genome:
    t = get_task(TASK)
    return Genome.from_dict(
        {
            "regions": [
                {
                    "id": "s0",
                    "type": "structural",
                    "settings": {"d_model": 16, "vocab": t.vocab_size, "max_len": t.seq_len},
                },
                {"id": "r0", "type": "regulatory", "bases": [{"base": "C", "kind": "gate"}]},
                {"id": "p0", "type": "promoter", "settings": {"copies": 2}},
                {
                    "id": "c0",
                    "type": "coding",
                    "bases": [{"base": "T", "kind": "conv"}, {"base": "A", "kind": "mlp"}],
                },
            ],
            "edges": [{"source": "r0", "target": "c0", "kind": "activates"}],
        }
    )


def tiny_run(db: str) -> tuple[str, int, float]:
    """A one-individual run of the tiny genome, evaluated under the engine's key (a real
    training of 2 steps): (run id, individual id, its quality)."""
    genome = tiny_genome()
    config = RunConfig(population=2, generations=0, steps=STEPS, task=TASK, max_params=100_000)
    seed = derive_seed("eval", genome.id, TASK)
    result = evaluate(EvalRequest(genome.to_yaml(), genome.id, TASK, STEPS, seed))
    assert result.status == "ok", result.reason
    with Store(db) as store:
        run_id = store.create_run(config.to_dict(), seed=0, task=TASK)
        ids = store.commit_generation(
            run_id,
            0,
            genomes=[(genome.id, genome.to_yaml(), genome.sequence_view())],
            individuals=[IndividualIn(0, genome.id, seed)],
            evaluations=[
                EvaluationIn(
                    genome.id, TASK, STEPS, seed, "ok", result.metrics, None, 1.0, individual=by_slot(0)
                )
            ],
            members=[by_slot(0)],
        )
        store.set_run_status(run_id, "finished")
    return run_id, ids[0], float(result.metrics["quality"])


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> Pools:
    fake = Pools()
    monkeypatch.setattr(ablate_cli, "_pool", fake)
    return fake


def rows(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as c:
        return int(c.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])


def test_an_ablation_is_a_run_that_resumes_without_retraining(tmp_path, pools):
    db = tmp_path / "a.db"
    url = f"sqlite:///{db}"
    run_id, individual, quality = tiny_run(url)
    genome = tiny_genome()
    argv = ["ablate", genome.id[:10], "--seeds", "2", "--json", "--store", url]
    pools.stop_after = 4  # killed after 4 trainings
    code, _, err = evolve(*argv)
    assert code == 130 and "interrupted" in err
    assert rows(db) == 1 + 1 + 4  # the run's row, its copy, 4 trained
    pools.stop_after = None
    code, out, err = evolve(*argv)
    assert code == 0, err
    data = json.loads(out)
    changes = ["-gene:c0.T:conv", "-gene:c0.A:mlp", "-edge:r0>c0", "-regulation", "c0:x2→x1"]
    assert [a["change"] for a in data["ablations"]] == changes
    assert data["trained"] == 12 - 1 - 4 and pools.made[-1].requests == 7 and rows(db) == 13
    assert data["individual"] == individual and data["source_run"] == run_id and data["seeds"] == 2
    # the baseline's replicate 0 is the run's own evaluation, copied (by the first invocation)
    first = data["points"][0]
    assert (first["change"], first["replicate"], first["origin"]) == ("baseline", 0, "stored")
    with Store(url, create=False) as store:
        own = store.find_evaluation(genome.id, TASK, STEPS, first["seed"], run_id=run_id)
        copy = store.find_evaluation(genome.id, TASK, STEPS, first["seed"], run_id=data["run_id"])
        assert own is not None and copy is not None and copy.metrics["cached_from"] == own.id
    assert data["baseline"]["qualities"][0] == pytest.approx(quality)
    assert data["baseline"]["per_task"] == {}  # mqar alone: no members
    seeds = {(p["replicate"], p["seed"]) for p in data["points"]}
    assert len(seeds) == 2  # replicate k of every variant trains under one seed
    # the statistics are those of the stored qualities
    by_change: dict[str, list[float]] = {}
    for p in data["points"]:
        by_change.setdefault(p["change"], [0.0, 0.0])[p["replicate"]] = p["quality"]
    base = by_change["baseline"]
    assert data["baseline"]["mean"] == pytest.approx(sum(base) / 2)
    for a in data["ablations"]:
        own = by_change[a["change"]]
        d = [own[0] - base[0], own[1] - base[1]]
        assert a["delta"] == pytest.approx(sum(d) / 2) and a["mean"] == pytest.approx(sum(own) / 2)
        half = T_1 * abs(d[0] - d[1]) / math.sqrt(2) / math.sqrt(2)
        assert a["ci"] == pytest.approx([a["delta"] - half, a["delta"] + half])
        assert a["params"] == account(Genome.from_yaml(genome_yaml(db, a["genome_id"]))).params
    with Store(url, create=False) as store:
        run = store.get_run(data["run_id"])
        assert run is not None and run.kind == "ablate" and run.status == "finished"
        assert run.evaluated == 12 and run.config["individual"] == individual
    # a second invocation trains nothing; the table
    code, out, _ = evolve(*argv)
    again = json.loads(out)
    assert code == 0 and again["trained"] == 0 and len(pools.made) == 2 and rows(db) == 13
    assert again["run_id"] == data["run_id"] and {p["origin"] for p in again["points"]} <= {"stored"}
    assert {k: again[k] for k in ("baseline", "ablations")} == {k: data[k] for k in ("baseline", "ablations")}
    code, text, _ = evolve(*argv[:-3], "--store", url)
    assert code == 0 and "-gene:c0.A:mlp" in text and "delta" in text and "0 trainings" in text
    # a third seed and --only: the same run, only what is missing trains
    code, out, _ = evolve(
        "ablate", str(individual), "--seeds", "3", "--only", "c0:x2->x1", "--json", "--store", url
    )
    third = json.loads(out)
    assert code == 0 and third["run_id"] == data["run_id"] and third["trained"] == 2
    assert [a["change"] for a in third["ablations"]] == ["c0:x2→x1"] and third["ablations"][0]["n"] == 3
    code, _, err = evolve("run", "--resume", data["run_id"], "--store", url)
    assert code == 2 and "ablate" in err


def test_an_environment_failure_stops_an_ablation_records_nothing_and_a_rerun_resumes(tmp_path, pools):
    """The one training driver (`training_run.train`) stops at an environment failure: one
    line, exit 2, nothing stored for that training, the run released but not failed; the
    same command run again trains what is missing."""
    db = tmp_path / "e.db"
    url = f"sqlite:///{db}"
    _, individual, _ = tiny_run(url)
    argv = ["ablate", str(individual), "--seeds", "2", "--json", "--store", url]
    pools.broken_at = 3  # the third training's worker cannot import
    code, out, err = evolve(*argv)
    errors = [line for line in err.splitlines() if "error" in line.lower()]  # beside its progress
    assert code == 2 and out == "" and len(errors) == 1, err
    assert errors[0].startswith("evolve: error: environment failure: ImportError"), errors
    assert "nothing was recorded against genome" in errors[0]
    assert errors[0].endswith("fix the cause, then run the same command again"), errors
    assert rows(db) == 1 + 1 + 2  # the run's row, its copy, the 2 trained before the failure
    with Store(url, create=False) as store:
        [ablation] = store.list_runs("ablate")
        assert ablation.status == "running" and ablation.driver is None  # resumable, not failed
        assert ablation.shown_status == "interrupted"
    pools.broken_at = None
    code, out, err = evolve(*argv)
    assert code == 0, err
    data = json.loads(out)
    assert data["run_id"] == ablation.id and data["trained"] == 12 - 1 - 2 and rows(db) == 13


def test_variants_train_on_the_runs_tasks_budget_and_seeds(tmp_path):
    """Steps and seeds are the engine's own: under a flops budget each variant trains for the
    run's compute at its own cost; under the run seed policy replicate k is the run's seed of
    the baseline. Several tasks: one training per task, quality their mean."""
    genome = tiny_genome()
    config = RunConfig(
        population=2,
        steps=40,
        task=f"{TASK},selective_copying",
        budget="flops",
        seed=7,
        seed_policy="run",
        max_params=20_000,
    )
    with Store(f"sqlite:///{tmp_path / 'f.db'}") as store:
        run_id = store.create_run(config.to_dict(), seed=7, task=config.task)
        ids = store.commit_generation(
            run_id,
            0,
            genomes=[(genome.id, genome.to_yaml(), genome.sequence_view())],
            individuals=[IndividualIn(0, genome.id, 0)],
            members=[by_slot(0)],
        )
        record = store.individual(ids[0])
        assert record is not None
        plan = ablate.make_plan(store, record, seeds=2)
        from dogma_evolve.evolution.evaluating import Evaluator
        from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace

        engine = Evaluator(config, DogmaSpace.from_config(config), store, run_id, lambda *_: None)
    steps = {v.name: v.steps for v in plan.variants}
    assert steps["c0:x2→x1"] > steps["baseline"]  # half the layers: more steps for the compute
    assert len(plan.points) == len(plan.variants) * 2 * 2
    for p in plan.points:
        assert p.seed == engine.seed_for(genome.id, p.task, p.replicate)
        if p.replicate == 0:  # the run policy: (run seed, genome id, task) for several tasks
            assert p.seed == derive_seed(7, genome.id, p.task)
    plan.points[0].settle("ok", {"quality": 0.5}, "trained")
    plan.points[1].settle("ok", {"quality": 0.25}, "trained")
    assert [p.task for p in plan.points[:2]] == [TASK, "selective_copying"]
    assert ablate_stats.replicate_qualities(plan, 0) == [0.375, None]
    plan.points[1].metrics["per_task"] = {"copy": 0.5}
    assert ablate_stats.per_task_means(plan, 0) == {
        TASK: 0.5,
        "selective_copying": 0.25,
        "selective_copying/copy": 0.5,
    }


def genome_yaml(db: Path, genome_id: str) -> str:
    with contextlib.closing(sqlite3.connect(db)) as c:
        return str(c.execute("SELECT yaml FROM genomes WHERE id = ?", (genome_id,)).fetchone()[0])


def test_bad_input_is_one_line_before_anything_is_written(tmp_path, pools):
    url = f"sqlite:///{tmp_path / 'b.db'}"
    _, individual, _ = tiny_run(url)
    before = rows(tmp_path / "b.db")
    for argv, words in (
        (["999999"], "no individual"),
        (["zz"], "neither an individual id"),
        ([str(individual), "--seeds", "0"], "--seeds 0"),
        ([str(individual), "--workers", "0"], "--workers 0"),
        ([str(individual), "--timeout", "-1"], "--timeout"),
        ([str(individual), "--only", "gene:c9.T:conv"], "no change '-gene:c9.T:conv'"),
        ([str(individual), "--only=-gene:c9.T:conv"], "no change '-gene:c9.T:conv'"),
    ):
        code, out, err = evolve("ablate", *argv, "--store", url)
        assert code == 2 and out == "" and words in err and err.count("\n") == 1, (argv, err)
    code, _, err = evolve("ablate", "1", "--store", f"sqlite:///{tmp_path / 'none.db'}")
    assert code == 2 and err.count("\n") == 1
    assert rows(tmp_path / "b.db") == before and pools.made == []
    code, out, _ = evolve("ablate", str(individual), "--list", "--json", "--store", url)
    assert code == 0 and [c["change"] for c in json.loads(out)["changes"]][0] == "-gene:c0.T:conv"


@pytest.mark.slow
def test_an_ablation_trains_on_ray(tmp_path):
    """The command's own pool: Ray, one worker, one change and the baseline's second seed."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    _, individual, _ = tiny_run(url)
    argv = ["ablate", str(individual), "--seeds", "2", "--only", "edge:r0>c0", "--workers", "1"]
    code, out, err = evolve(*argv, "--json", "--store", url)
    assert code == 0, err
    data = json.loads(out)
    assert data["trained"] == 3 and all(p["status"] == "ok" for p in data["points"])
    assert "[3/3]" in err
    code, out, _ = evolve(*argv, "--json", "--store", url)
    assert code == 0 and json.loads(out)["trained"] == 0
