"""Round trips through the public API: what goes in comes back, as plain data."""

from __future__ import annotations

import math
from datetime import UTC

import pytest

from dogma_evolve.store import (
    RUN_KINDS,
    ArchiveIn,
    EvaluationIn,
    IndividualIn,
    LineageIn,
    PolicyIn,
    Store,
    StoreError,
    by_id,
    by_slot,
)


def test_run_round_trip_and_listing(store: Store) -> None:
    config = {"population": 8, "nested": {"b": [1, 2.5, None], "a": "ü"}, "flag": True}
    first = store.create_run(config, seed=7, task="mqar")
    second = store.create_run({}, seed=8, task="lm")

    run = store.get_run(first)
    assert run is not None
    assert (run.id, run.seed, run.task, run.status) == (first, 7, "mqar", "running")
    assert run.config == config
    assert (run.last_generation, run.generations, run.evaluated) == (-1, 0, 0)
    assert run.created.tzinfo is UTC

    store.set_run_status(second, "finished")
    listed = {r.id: r for r in store.list_runs()}
    assert set(listed) == {first, second}
    assert listed[second].status == "finished"
    assert store.get_run("nope") is None
    with pytest.raises(StoreError):
        store.set_run_status(first, "paused")
    with pytest.raises(StoreError):
        store.set_run_status("nope", "failed")


def test_a_run_keeps_its_kind_and_runs_are_found_by_kind(store: Store) -> None:
    search = store.create_run({"strategy": "random"}, seed=1, task="mqar")  # kind by default
    scale = store.create_run({"ladder": {}}, seed=0, task="mqar", kind="scale")
    ablate = store.create_run({"ablation": {}}, seed=0, task="mqar", kind="ablate")
    later_search = store.create_run({}, seed=2, task="mqar", kind="search")

    assert RUN_KINDS == ("search", "scale", "ablate", "calibrate", "select")
    assert {r.id: r.kind for r in store.list_runs()} == {
        search: "search",
        scale: "scale",
        ablate: "ablate",
        later_search: "search",
    }
    assert store.get_run(scale).kind == "scale"
    assert [r.id for r in store.list_runs("search")] == [search, later_search]  # oldest first
    assert [r.id for r in store.list_runs(kind="ablate")] == [ablate]
    assert store.newest_run("search").id == later_search
    assert store.newest_run("scale").id == scale
    assert store.newest_run().id == later_search
    assert store.newest_run("search") == store.list_runs("search")[-1]
    with pytest.raises(StoreError, match="run kind"):
        store.create_run({}, seed=0, task="mqar", kind="nsga2")  # a strategy, not a kind
    with pytest.raises(StoreError, match="run kind"):
        store.list_runs("ladder")
    with pytest.raises(StoreError, match="run kind"):
        store.newest_run("Search")
    assert len(store.list_runs()) == 4  # the refused run was not created


def test_a_store_without_runs_of_a_kind_has_no_newest(store: Store) -> None:
    assert store.newest_run() is None
    store.create_run({}, seed=0, task="mqar", kind="scale")
    assert store.newest_run("search") is None and store.list_runs("search") == []
    assert store.newest_run().kind == "scale"


def test_generation_round_trip(store: Store, helpers) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    seeds = [helpers.make_genome(f"seed{i}") for i in range(3)]
    metrics = {"loss": 0.125, "accuracy": 1 / 3, "params": 12345, "per_task": {"a": [0.5, 1e-9]}}
    ids0 = store.commit_generation(
        run_id,
        0,
        genomes=seeds,
        individuals=[IndividualIn(slot=i, genome_id=g.id, seed=100 + i) for i, g in enumerate(seeds)],
        evaluations=[
            EvaluationIn(g.id, "mqar", 0, 100 + i, "ok", metrics, wall_seconds=1.5, individual=by_slot(i))
            for i, g in enumerate(seeds)
        ],
        members=[by_slot(2), by_slot(0), by_slot(1)],
    )
    assert sorted(ids0) == [0, 1, 2]

    child = helpers.make_genome("child")
    change = {"op": "point", "location": [0, "attention"], "before": 4, "after": 8}
    ids1 = store.commit_generation(
        run_id,
        1,
        genomes=[child],
        individuals=[IndividualIn(0, child.id, seed=200, operator="point", change=change)],
        evaluations=[
            EvaluationIn(
                child.id,
                "mqar",
                0,
                200,
                "nan",
                {"loss": math.nan},
                reason="loss nan",
                individual=by_slot(0),
            )
        ],
        lineage=[LineageIn(child=0, parent=by_id(ids0[1]), operator="point", change=change)],
        members=[by_id(ids0[2]), by_slot(0)],
    )

    population = store.population(run_id)
    assert [ind.id for ind in population] == [ids0[2], ids1[0]]
    survivor, born = population
    assert (survivor.generation, survivor.slot, survivor.seed) == (0, 2, 102)
    assert survivor.yaml == seeds[2].yaml and survivor.sequence == seeds[2].sequence
    assert survivor.metrics == metrics and survivor.status == "ok"
    assert born.parents == [ids0[1]] and born.change == change and born.operator == "point"
    assert born.status == "nan" and born.evaluation.reason == "loss nan"
    assert math.isnan(born.metrics["loss"])

    assert [ind.id for ind in store.population(run_id, 0)] == [ids0[2], ids0[0], ids0[1]]
    assert store.population(run_id, 5) == []

    record = store.individual(ids1[0])
    assert record is not None and record.genome_id == child.id and record.generation == 1
    assert store.individual(10_000) is None

    everyone = store.individuals(run_id)
    assert [(i.generation, i.slot) for i in everyone] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert all(i.evaluation is not None for i in everyone)
    assert everyone[3] == record

    run = store.get_run(run_id)
    assert (run.last_generation, run.generations, run.evaluated) == (1, 2, 4)


def test_fidelity_keeps_its_type_and_cache_lookup(store: Store, helpers) -> None:
    genome = helpers.make_genome("cached")
    run_a = store.create_run({}, seed=1, task="mqar")
    run_b = store.create_run({}, seed=2, task="mqar")
    store.commit_generation(
        run_a,
        0,
        genomes=[genome],
        individuals=[IndividualIn(0, genome.id, 5)],
        evaluations=[
            EvaluationIn(genome.id, "mqar", 1, 5, "ok", {"loss": 2.0}, individual=by_slot(0)),
            EvaluationIn(genome.id, "mqar", "full", 5, "ok", {"loss": 1.0}),
        ],
        members=[by_slot(0)],
    )
    found = store.find_evaluation(genome.id, "mqar", 1, 5)
    assert found is not None and found.fidelity == 1 and found.metrics == {"loss": 2.0}
    assert found.run_id == run_a
    assert store.find_evaluation(genome.id, "mqar", "full", 5).metrics == {"loss": 1.0}
    # "1" (a name) and 1 (a level) are different fidelities
    assert store.find_evaluation(genome.id, "mqar", "1", 5) is None
    assert store.find_evaluation(genome.id, "mqar", 1, 6) is None
    assert store.find_evaluation(genome.id, "lm", 1, 5) is None
    # within a run, or across runs
    assert store.find_evaluation(genome.id, "mqar", 1, 5, run_id=run_b) is None
    assert store.find_evaluation(genome.id, "mqar", 1, 5, run_id=run_a).id == found.id


def test_policy_and_archive(store: Store, helpers) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    elite, other, third = (helpers.make_genome(x) for x in ("elite", "other", "third"))
    store.commit_generation(
        run_id,
        0,
        genomes=[elite, other, third],
        individuals=[IndividualIn(i, g.id, i) for i, g in enumerate((elite, other, third))],
        members=[by_slot(0), by_slot(1)],
        policy=[PolicyIn("point", "attention", 1.0, 3.0), PolicyIn("crossover", "*", 0.0, 1.0)],
        archive=[ArchiveIn(elite.id, {"loss": 0.5}), ArchiveIn(other.id, {"loss": 0.7})],
    )
    # only what changed is passed: the rest is kept, an elite leaves by name
    store.commit_generation(
        run_id,
        1,
        members=[by_id(1), by_id(3)],
        policy=[PolicyIn("point", "attention", 2.0, 4.0)],
        archive=[ArchiveIn(elite.id, {"loss": 0.4}), ArchiveIn(third.id, {"loss": 0.6})],
        archive_remove=[other.id],
    )
    policy = store.policy(run_id)
    assert [(p.operator, p.context, p.successes, p.trials) for p in policy] == [
        ("crossover", "*", 0.0, 1.0),
        ("point", "attention", 2.0, 4.0),
    ]
    archive = store.archive(run_id)
    assert sorted((a.genome_id, a.metrics["loss"], a.yaml) for a in archive) == sorted(
        [(elite.id, 0.4, elite.yaml), (third.id, 0.6, third.yaml)]
    )
    # a generation that passes neither leaves both as they are
    store.commit_generation(run_id, 2, members=[by_id(1)])
    assert store.policy(run_id) == policy and store.archive(run_id) == archive
    # a new run starts from a previous run's memory and elites
    successor = store.create_run({}, seed=2, task="mqar")
    store.commit_generation(
        successor,
        0,
        individuals=[IndividualIn(0, elite.id, 9)],
        members=[by_slot(0)],
        policy=[PolicyIn(p.operator, p.context, p.successes, p.trials) for p in policy],
        archive=[ArchiveIn(a.genome_id, a.metrics) for a in archive],
    )
    assert store.policy(successor) == policy
    with pytest.raises(StoreError, match="both"):
        store.commit_generation(run_id, 3, archive=[ArchiveIn(elite.id, {})], archive_remove=[elite.id])


def test_find_by_genome_prefix(store: Store, helpers) -> None:
    genomes = [helpers.make_genome(f"p{i}") for i in range(4)]
    runs = [store.create_run({}, seed=i, task="t") for i in range(2)]
    for run_id in runs:
        store.commit_generation(
            run_id,
            0,
            genomes=genomes,
            individuals=[IndividualIn(i, g.id, i) for i, g in enumerate(genomes)],
            members=[by_slot(i) for i in range(4)],
        )
    target = genomes[2].id
    found = store.find_individuals_by_genome_prefix(target[:10].upper())
    assert {(f.run_id, f.genome_id) for f in found} == {(r, target) for r in runs}
    assert [f.run_id for f in store.find_individuals_by_genome_prefix(target[:10], runs[1])] == [runs[1]]
    assert store.find_individuals_by_genome_prefix("f" * 64) == []
    for bad in ("", "ab%", "a_"):
        with pytest.raises(StoreError):
            store.find_individuals_by_genome_prefix(bad)


def test_ancestry_walks_back_to_seeds(store: Store, helpers) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    a, b, c, d = (helpers.make_genome(x) for x in "abcd")
    gen0 = store.commit_generation(
        run_id,
        0,
        genomes=[a, b],
        individuals=[IndividualIn(0, a.id, 1), IndividualIn(1, b.id, 2)],
        members=[by_slot(0), by_slot(1)],
    )
    # slot 1 is a crossover of slot 0 (same generation) and a seed; slot 0 mutates a seed
    gen1 = store.commit_generation(
        run_id,
        1,
        genomes=[c, d],
        individuals=[
            IndividualIn(0, c.id, 3, "point", {"after": 1}),
            IndividualIn(1, d.id, 4, "crossover", {"cut": 2}),
        ],
        lineage=[
            LineageIn(0, by_id(gen0[0]), "point", {"after": 1}),
            LineageIn(1, by_slot(0), "crossover", {"cut": 2, "side": "left"}),
            LineageIn(1, by_id(gen0[1]), "crossover", {"cut": 2, "side": "right"}),
        ],
        members=[by_slot(0), by_slot(1)],
    )
    steps = store.ancestry(gen1[1])
    assert [(s.individual_id, s.depth) for s in steps] == [
        (gen1[1], 0),
        (gen1[0], 1),
        (gen0[1], 1),
        (gen0[0], 2),
    ]
    assert steps[0].operator == "crossover"
    assert [(p.parent_id, p.change["side"]) for p in steps[0].parents] == [
        (gen1[0], "left"),
        (gen0[1], "right"),
    ]
    seeds = [s.individual_id for s in steps if not s.parents]
    assert sorted(seeds) == sorted(gen0.values())
    assert store.individual(gen1[1]).parents == [gen1[0], gen0[1]]
    with pytest.raises(StoreError):
        store.ancestry(999)


def test_artifacts_round_trip_and_tamper_detection(store: Store, helpers, tmp_path, store_url) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    genome = helpers.make_genome("w")
    ids = store.commit_generation(
        run_id,
        0,
        genomes=[genome],
        individuals=[IndividualIn(0, genome.id, 1)],
        members=[by_slot(0)],
    )
    weights = helpers.safetensors_bytes([1.0, 2.0, 3.0])
    digest = store.put_artifact(run_id, ids[0], "weights", weights)
    assert store.get_artifact(ids[0], "weights") == weights
    assert store.get_artifact(ids[0], "optimizer") is None
    # a second put replaces, it does not double
    newer = helpers.safetensors_bytes([4.0])
    assert store.put_artifact(run_id, ids[0], "weights", newer) != digest
    assert store.get_artifact(ids[0], "weights") == newer
    assert helpers.row_counts(store_url)["artifacts"] == 1

    with pytest.raises(StoreError, match="not safetensors"):
        store.put_artifact(run_id, ids[0], "weights", b"\x80\x04pickle")
    with pytest.raises(StoreError):
        store.put_artifact("other", ids[0], "weights", weights)

    helpers.execute_unchecked(
        store_url, [("UPDATE artifacts SET blob = :blob", {"blob": weights[:-1] + b"\x00"})]
    )
    with pytest.raises(StoreError, match="sha256"):
        store.get_artifact(ids[0], "weights")

    file = tmp_path / "w.safetensors"
    file.write_bytes(weights)
    store.put_artifact(run_id, ids[0], "file", path=file)
    assert store.get_artifact(ids[0], "file") == weights
    file.write_bytes(newer)
    with pytest.raises(StoreError, match="sha256"):
        store.get_artifact(ids[0], "file")
