"""The `transfer` table (revision 0004): written with a generation, read back, checked on retry."""

from __future__ import annotations

import pytest

from dogma_evolve.store import EvaluationIn, IndividualIn, Store, StoreError, TransferIn, by_slot


def _generation(helpers, generation: int) -> dict:
    genome = helpers.make_genome(f"transfer{generation}")
    return dict(
        genomes=[genome],
        individuals=[IndividualIn(0, genome.id, seed=generation)],
        evaluations=[
            EvaluationIn(genome.id, "mqar", 3, generation, "ok", {"quality": 0.5}, individual=by_slot(0))
        ],
        members=[by_slot(0)],
    )


ROW = TransferIn(3, 5, 6, 0.6, 0.1, 0.9, 0.47, 0.07, 0.87)


def test_transfer_rows_round_trip_by_generation(store: Store, helpers) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    store.commit_generation(run_id, 0, **_generation(helpers, 0), transfer=[TransferIn(3, 5, 2)])
    store.commit_generation(run_id, 1, **_generation(helpers, 1), transfer=[ROW, TransferIn("a", "b", 0)])
    rows = store.transfer(run_id)
    assert [(t.generation, t.lower_fidelity, t.higher_fidelity, t.n) for t in rows] == [
        (0, 3, 5, 2),
        (1, 3, 5, 6),
        (1, "a", "b", 0),
    ]
    assert rows[0].spearman is None and rows[0].kendall_high is None  # undefined stays None
    assert (rows[1].spearman, rows[1].spearman_low, rows[1].kendall_high) == (0.6, 0.1, 0.87)
    assert store.transfer("nope") == []


def test_a_retried_commit_must_offer_the_same_transfer(store: Store, helpers) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    gen0 = _generation(helpers, 0)
    ids = store.commit_generation(run_id, 0, **gen0, transfer=[ROW])
    assert store.commit_generation(run_id, 0, **gen0, transfer=[ROW]) == ids  # the same: accepted
    with pytest.raises(StoreError, match="different fidelity transfer"):
        store.commit_generation(run_id, 0, **gen0, transfer=[TransferIn(3, 5, 6, 0.5)])
    with pytest.raises(StoreError, match="different fidelity transfer"):
        store.commit_generation(run_id, 0, **gen0)
    assert len(store.transfer(run_id)) == 1


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([ROW, ROW], "given twice"),
        ([TransferIn(3, 5, -1)], "n must be a count"),
        ([TransferIn(3, 5, 4, 1.5)], r"spearman must lie in \[-1, 1\]"),
        ([TransferIn(3, 5, 4, None, None, None, float("nan"))], "kendall must lie"),
        ([TransferIn(3.5, 5, 4)], "fidelity must be an int level or a name"),  # type: ignore[arg-type]
    ],
)
def test_bad_transfer_is_refused_before_anything_is_written(store: Store, helpers, bad, message) -> None:
    run_id = store.create_run({}, seed=1, task="mqar")
    with pytest.raises(StoreError, match=message):
        store.commit_generation(run_id, 0, **_generation(helpers, 0), transfer=bad)
    assert store.get_run(run_id).last_generation == -1 and store.transfer(run_id) == []
