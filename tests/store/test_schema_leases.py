"""Schema creation under a race, schema revisions, 63-bit seeds, and evaluation leases."""

from __future__ import annotations

import multiprocessing
import time
import traceback

import pytest

from dogma_evolve.store import EvaluationIn, IndividualIn, LeaseIn, Store, StoreError, by_slot

OPENERS = 6


def _open_at_once(url: str, barrier, results) -> None:
    try:
        barrier.wait(timeout=60)
        with Store(url) as store:
            store.create_run({}, seed=1, task="t")
        results.put(None)
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put(traceback.format_exc())


def test_processes_opening_an_empty_store_at_once_create_it_once(store_url: str, helpers) -> None:
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(OPENERS), context.Queue()
    processes = [
        context.Process(target=_open_at_once, args=(store_url, barrier, results)) for _ in range(OPENERS)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    assert [o for o in outcomes if o] == []
    assert helpers.row_counts(store_url, ("runs", "schema_version", "alembic_version")) == {
        "runs": OPENERS,
        "schema_version": 1,
        "alembic_version": 1,
    }


def test_a_store_from_a_newer_program_is_refused_untouched(store_url: str, helpers) -> None:
    with Store(store_url) as store:
        store.create_run({}, seed=1, task="t")
    # a newer program upgraded the store to a revision this one does not have
    helpers.execute_unchecked(store_url, [("UPDATE alembic_version SET version_num = '9999'", {})])
    with pytest.raises(StoreError, match="revision 9999, newer than this program"):
        Store(store_url)
    assert helpers.row_counts(store_url, ("runs",)) == {"runs": 1}
    assert helpers.scalar(store_url, "SELECT version_num FROM alembic_version") == "9999"


def test_sixty_three_bit_seeds_round_trip(store: Store, helpers) -> None:
    seed = 2**63 - 1  # evaluation.tasks.derive_seed yields seeds up to this
    run_id = store.create_run({}, seed=seed, task="t")
    genome = helpers.make_genome("big-seed")
    store.commit_generation(
        run_id,
        0,
        genomes=[genome],
        individuals=[IndividualIn(0, genome.id, seed)],
        evaluations=[EvaluationIn(genome.id, "t", 5, seed, "ok", {}, individual=by_slot(0))],
        members=[by_slot(0)],
    )
    assert store.get_run(run_id).seed == seed
    assert store.population(run_id)[0].seed == seed
    assert store.find_evaluation(genome.id, "t", 5, seed).seed == seed


def test_leases_upsert_close_and_reclaim(store: Store) -> None:
    run_id = store.create_run({}, seed=1, task="t")
    key = ("ab" * 32, "t", 5, 99)
    store.update_leases(run_id, [LeaseIn(*key, attempt=1, state="running", lease_s=60, worker="h:1")])
    store.update_leases(run_id, [LeaseIn(*key, attempt=1, state="running", lease_s=60)])  # beat
    [lease] = store.leases(run_id)
    assert (lease.attempt, lease.state, lease.worker) == (1, "running", "h:1")
    assert lease.expires > lease.heartbeat >= lease.started

    # attempt 1 lost its worker, attempt 2 finished; a late beat of attempt 1 changes nothing
    store.update_leases(
        run_id,
        [
            LeaseIn(*key, attempt=1, state="lost", reason="worker died"),
            LeaseIn(*key, attempt=2, state="running", lease_s=60, worker="h:2"),
        ],
    )
    store.update_leases(run_id, [LeaseIn(*key, attempt=2, state="done")])
    store.update_leases(run_id, [LeaseIn(*key, attempt=1, state="running", lease_s=60)])
    assert [(x.attempt, x.state) for x in store.leases(run_id)] == [(1, "lost"), (2, "done")]

    # a driver that died left attempt 1 of another evaluation running: reclaimed once expired
    other = ("cd" * 32, "t", 5, 7)
    store.update_leases(run_id, [LeaseIn(*other, attempt=1, state="running", lease_s=0.05)])
    assert store.reclaim_expired_leases(run_id) in (0, 1)
    time.sleep(0.1)
    store.reclaim_expired_leases(run_id)
    assert store.leases(run_id, "running") == []
    [expired] = store.leases(run_id, "expired")
    assert expired.genome_id == other[0] and "reclaimed" in expired.reason

    with pytest.raises(StoreError, match="lease state"):
        store.update_leases(run_id, [LeaseIn(*key, attempt=3, state="zombie")])
    with pytest.raises(StoreError, match="no run"):
        store.update_leases("nope", [LeaseIn(*key, attempt=1, state="running")])
