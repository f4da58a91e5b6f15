"""The attempts a killed driver leaves in flight are closed when the next driver takes the run,
and the next driver's own attempts are recorded after them (found by the soak,
`benchmarks/soak.py`: a worker node killed, then the driver killed while the lost attempt's
retry ran; the resume trained the evaluation again as attempt 0 and the retry's lease, attempt
1, stayed `running` for good, which `evolve check` reports as a stale lease).

Time is never waited for: a killed driver is a claim written with an old heartbeat. On SQLite
and, where EVOLVE_TEST_POSTGRES_URL is set, PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dogma_evolve.store import LeaseIn, LeaseLog, Store
from dogma_evolve.store.check import check_store
from dogma_evolve.store.testing import postgres_or_skip, scratch_database

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)
GENOME = "ab" * 32


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as opened:
            yield opened
        return
    with scratch_database(postgres_or_skip()) as url, Store(url) as opened:
        yield opened


def lease(attempt: int, state: str) -> LeaseIn:
    # a lease far from expiry: only the driver's death can make it stale
    return LeaseIn(GENOME, "mqar", 5, 11, attempt=attempt, state=state, lease_s=600.0, worker="w@node")


def killed_mid_retry(store: Store) -> str:
    """A run whose driver lost attempt 0 (its node died), started attempt 1, and was killed."""
    run_id = store.create_run({}, seed=11, task="mqar")
    store.claim_run(run_id, "host:1:killed", now=LONG_AGO)
    log = LeaseLog(store, run_id)
    for news in (lease(0, "running"), lease(0, "lost"), lease(1, "running")):
        log(news)
    return run_id


def test_taking_over_a_run_closes_the_attempts_its_dead_driver_left_running(store: Store) -> None:
    run_id = killed_mid_retry(store)
    assert store.claim_run(run_id, "host:2:resumed") == "host:1:killed"
    [closed] = [row for row in store.leases(run_id) if row.attempt == 1]
    assert closed.state == "expired" and "host:1:killed" in (closed.reason or "")
    assert store.leases(run_id, "running") == []
    assert all(f.status == "ok" for f in check_store(store)), check_store(store)


def test_the_next_drivers_attempts_are_numbered_after_the_dead_ones(store: Store) -> None:
    run_id = killed_mid_retry(store)
    store.claim_run(run_id, "host:2:resumed")
    log = LeaseLog(store, run_id)  # the resumed driver's pool trains the evaluation again
    for news in (lease(0, "running"), lease(0, "done")):
        log(news)
    shown = [(row.attempt, row.state) for row in store.leases(run_id)]
    assert shown == [(0, "lost"), (1, "expired"), (2, "done")]  # none lost, none left running


def test_a_driver_reclaiming_its_own_run_closes_nothing(store: Store) -> None:
    run_id = store.create_run({}, seed=11, task="mqar", driver="host:3:live")
    LeaseLog(store, run_id)(lease(0, "running"))
    assert store.claim_run(run_id, "host:3:live") is None  # a refresh, not a takeover
    assert [row.state for row in store.leases(run_id)] == ["running"]
