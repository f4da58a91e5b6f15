"""commit_generation: one transaction, natural keys, a counter that never goes back."""

from __future__ import annotations

import pytest

from dogma_evolve.store import EvaluationIn, IndividualIn, LineageIn, Store, StoreError, by_id, by_slot


def _generation(helpers, generation: int, parents: list[int], size: int = 3) -> dict:
    """Keyword arguments of one generation: ``size`` children of ``parents`` (ids)."""
    genomes = [helpers.make_genome(f"g{generation}s{slot}") for slot in range(size)]
    individuals = [
        IndividualIn(
            slot,
            g.id,
            seed=1000 * generation + slot,
            operator="point" if parents else None,
            change={"slot": slot} if parents else None,
        )
        for slot, g in enumerate(genomes)
    ]
    lineage = (
        [
            LineageIn(slot, by_id(parents[slot % len(parents)]), "point", {"slot": slot})
            for slot in range(size)
        ]
        if parents
        else []
    )
    evaluations = [
        EvaluationIn(
            g.id,
            "mqar",
            0,
            1000 * generation + slot,
            "ok",
            {"loss": 1.0 / (slot + 1)},
            wall_seconds=0.25,
            individual=by_slot(slot),
        )
        for slot, g in enumerate(genomes)
    ]
    members = [by_slot(slot) for slot in range(size)] + [by_id(p) for p in parents[:1]]
    return dict(
        genomes=genomes,
        individuals=individuals,
        evaluations=evaluations,
        lineage=lineage,
        members=members,
    )


def test_retried_commit_doubles_nothing(store: Store, helpers, store_url) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    gen0 = _generation(helpers, 0, [])
    ids0 = store.commit_generation(run_id, 0, **gen0)
    gen1 = _generation(helpers, 1, list(ids0.values()))
    ids1 = store.commit_generation(run_id, 1, **gen1)
    counts = helpers.row_counts(store_url)
    assert counts["individuals"] == 6 and counts["evaluations"] == 6 and counts["lineage"] == 3

    # the acknowledgement was lost: the driver sends both generations again
    assert store.commit_generation(run_id, 1, **gen1) == ids1
    assert store.commit_generation(run_id, 0, **gen0) == ids0
    assert helpers.row_counts(store_url) == counts
    assert store.get_run(run_id).last_generation == 1
    assert [i.id for i in store.population(run_id)] == [*ids1.values(), ids0[0]]


def test_evaluation_natural_key_is_insert_if_absent(store: Store, helpers, store_url) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    genome = helpers.make_genome("x")
    twice = EvaluationIn(genome.id, "mqar", 0, 5, "ok", {"loss": 1.0}, individual=by_slot(0))
    store.commit_generation(
        run_id,
        0,
        genomes=[genome, genome],
        individuals=[IndividualIn(0, genome.id, 5)],
        evaluations=[twice, twice],
        members=[by_slot(0)],
    )
    # a re-evaluation of the same key in a later generation keeps the first result
    again = EvaluationIn(genome.id, "mqar", 0, 5, "timeout", {}, individual=by_slot(0))
    store.commit_generation(
        run_id,
        1,
        genomes=[genome],
        individuals=[IndividualIn(0, genome.id, 5)],
        evaluations=[again],
        members=[by_slot(0)],
    )
    counts = helpers.row_counts(store_url)
    assert (counts["genomes"], counts["evaluations"], counts["individuals"]) == (1, 1, 2)
    assert store.find_evaluation(genome.id, "mqar", 0, 5).status == "ok"
    # both births of the genome see its evaluation
    assert [i.status for i in store.individuals(run_id)] == ["ok", "ok"]


def test_failed_commit_stores_nothing(store: Store, helpers, store_url) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    ids0 = store.commit_generation(run_id, 0, **_generation(helpers, 0, []))
    before = helpers.row_counts(store_url)

    broken = _generation(helpers, 1, list(ids0.values()))
    # the last evaluation points at a slot nobody was born in: found after rows were flushed
    broken["evaluations"][-1] = EvaluationIn(
        broken["genomes"][0].id, "mqar", 0, 77, "ok", {}, individual=by_slot(99)
    )
    with pytest.raises(StoreError, match="slot 99"):
        store.commit_generation(run_id, 1, **broken)
    assert helpers.row_counts(store_url) == before
    assert store.get_run(run_id).last_generation == 0

    # a failure raised by the database itself (NOT NULL) rolls back the same way
    null_seed = _generation(helpers, 1, list(ids0.values()))
    null_seed["individuals"][-1] = IndividualIn(2, null_seed["genomes"][2].id, seed=None)
    with pytest.raises(StoreError):
        store.commit_generation(run_id, 1, **null_seed)
    assert helpers.row_counts(store_url) == before

    # nothing of the failed attempts is in the way of the real generation 1
    good = store.commit_generation(run_id, 1, **_generation(helpers, 1, list(ids0.values())))
    assert sorted(good) == [0, 1, 2]
    assert store.get_run(run_id).last_generation == 1


def test_generation_counter_never_goes_back(store: Store, helpers, store_url) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    with pytest.raises(StoreError, match="skip"):
        store.commit_generation(run_id, 1, **_generation(helpers, 1, []))
    ids0 = store.commit_generation(run_id, 0, **_generation(helpers, 0, []))
    store.commit_generation(run_id, 1, **_generation(helpers, 1, list(ids0.values())))
    counts = helpers.row_counts(store_url)

    other = _generation(helpers, 7, [])  # different births offered as generation 0
    with pytest.raises(StoreError, match="already committed"):
        store.commit_generation(run_id, 0, **other)
    changed = _generation(helpers, 1, list(ids0.values()))
    changed["members"] = changed["members"][::-1]
    with pytest.raises(StoreError, match="members"):
        store.commit_generation(run_id, 1, **changed)
    relinked = _generation(helpers, 1, list(ids0.values())[::-1])
    with pytest.raises(StoreError, match="already committed"):
        store.commit_generation(run_id, 1, **relinked)
    with pytest.raises(StoreError, match="skip"):
        store.commit_generation(run_id, 3, **_generation(helpers, 3, []))
    assert helpers.row_counts(store_url) == counts
    assert store.get_run(run_id).last_generation == 1


def test_references_are_checked(store: Store, helpers) -> None:
    run_a = store.create_run({}, seed=1, task="t")
    run_b = store.create_run({}, seed=2, task="t")
    ids_a = store.commit_generation(run_a, 0, **_generation(helpers, 0, []))
    store.commit_generation(run_b, 0, **_generation(helpers, 0, []))
    # a parent from another run, an unknown genome, a duplicated member, a malformed ref
    with pytest.raises(StoreError, match="not in this run"):
        store.commit_generation(run_b, 1, **_generation(helpers, 1, [ids_a[0]]))
    g = helpers.make_genome("unknown")
    with pytest.raises(StoreError, match="neither given nor stored"):
        store.commit_generation(run_a, 1, individuals=[IndividualIn(0, g.id, 1)])
    with pytest.raises(StoreError, match="twice"):
        store.commit_generation(run_a, 1, members=[by_id(ids_a[0]), by_id(ids_a[0])])
    with pytest.raises(StoreError, match="reference"):
        store.commit_generation(run_a, 1, members=[ids_a[0]])
    with pytest.raises(StoreError, match="no run"):
        store.commit_generation("missing", 0)
    assert store.get_run(run_a).last_generation == 0


def test_ancestry_survives_a_cycle_in_damaged_data(store: Store, helpers, store_url) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    ids0 = store.commit_generation(run_id, 0, **_generation(helpers, 0, [], size=1))
    ids1 = store.commit_generation(run_id, 1, **_generation(helpers, 1, [ids0[0]], size=1))
    insert = "INSERT INTO lineage (child_id, parent_id, operator) VALUES (:child, :parent, 'bad')"
    helpers.execute_unchecked(
        store_url,
        [(insert, {"child": ids0[0], "parent": ids1[0]}), (insert, {"child": ids1[0], "parent": 424242})],
    )
    steps = store.ancestry(ids1[0])
    assert [s.individual_id for s in steps] == [ids1[0], ids0[0]]
