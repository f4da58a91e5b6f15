"""A store that rides out an unreachable database (store/outage.py, store/transactions.py).

* which errors are transient (retried) and which are not;
* the bound: a setting, shared by every call of one store, one line when an outage begins
  and one when it ends;
* every write is idempotent when retried: its first attempt's commit landed (only the
  acknowledgement was lost) or did not, and the store ends with the rows of a store that
  never failed, none lost and none doubled, on SQLite and PostgreSQL;
* SQLite still locked after its busy timeout is retried the same way, up to the bound.

A real PostgreSQL server stopped under a running driver: tests/faults/test_store_outage.py.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session

import dogma_evolve.store.outage as outage
from dogma_evolve.store import (
    ArchiveIn,
    EvaluationIn,
    IndividualIn,
    LadderRankIn,
    LeaseIn,
    LineageIn,
    PolicyIn,
    Store,
    StoreError,
    by_id,
    by_slot,
)
from dogma_evolve.store.outage import Outage, is_transient, retry_seconds
from dogma_evolve.store.testing import TABLES, postgres_or_skip, scratch_database
from tests.store.test_sqlite import _commit_one

LOST = "server closed the connection unexpectedly"


def _dbapi(exc: BaseException, kind: type = OperationalError, invalidated: bool = False) -> Any:
    return kind("COMMIT", {}, exc, connection_invalidated=invalidated)


def test_transient_errors_are_told_apart() -> None:
    psycopg = pytest.importorskip("psycopg")
    transient = [
        _dbapi(sqlite3.OperationalError("database is locked")),
        _dbapi(psycopg.OperationalError("connection failed: Connection refused")),
        _dbapi(psycopg.OperationalError(LOST)),
        _dbapi(psycopg.errors.AdminShutdown("terminating connection due to administrator command")),
        _dbapi(psycopg.errors.CannotConnectNow("the database system is starting up")),
        _dbapi(psycopg.errors.ConnectionFailure("connection failure")),
        _dbapi(psycopg.InterfaceError("the connection is closed"), kind=ProgrammingError, invalidated=True),
    ]
    lasting = [
        _dbapi(sqlite3.OperationalError("no such table: runs")),
        _dbapi(sqlite3.OperationalError("disk I/O error")),
        _dbapi(sqlite3.IntegrityError("UNIQUE constraint failed"), kind=IntegrityError),
        _dbapi(psycopg.errors.UniqueViolation("duplicate key"), kind=IntegrityError),
        _dbapi(psycopg.errors.DiskFull("could not extend file")),
        _dbapi(psycopg.errors.UndefinedTable("relation does not exist"), kind=ProgrammingError),
        StoreError("no run 'x'"),
    ]
    assert [is_transient(exc) for exc in transient] == [True] * len(transient)
    assert [is_transient(exc) for exc in lasting] == [False] * len(lasting)


def test_the_bound_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(outage.RETRY_SECONDS_ENV, raising=False)
    assert retry_seconds() == outage.DEFAULT_RETRY_SECONDS == 180.0
    monkeypatch.setenv(outage.RETRY_SECONDS_ENV, "7.5")
    assert retry_seconds() == 7.5
    assert retry_seconds(0) == 0.0  # the argument wins: 0 turns the retries off
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv(outage.RETRY_SECONDS_ENV, bad)
        with pytest.raises(StoreError, match=outage.RETRY_SECONDS_ENV if bad == "soon" else "seconds"):
            retry_seconds()
    with pytest.raises(StoreError, match="retry_seconds"):
        retry_seconds(-2)


def test_an_outage_is_bounded_once_for_every_call_and_said_in_two_lines() -> None:
    now = [100.0]
    slept: list[float] = []
    said: list[str] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    down = Outage(10.0, say=said.append, clock=lambda: now[0], sleep=sleep)
    lost = _dbapi(sqlite3.OperationalError("database is locked"))
    attempts = 0
    while down.retry(lost, "commit", attempts):
        attempts += 1
    assert slept == [0.5, 1.0, 2.0, 4.0, 2.5]  # doubling, the last cut to the bound
    assert now[0] == 110.0 and down.outages == 1
    assert said == ["store busy (database is locked) during commit; retrying for up to 10 s"]
    assert "unreachable for 10 s, past the 10 s bound" in down.gave_up()
    # another call in the same outage fails at its first error: the bound is the outage's
    assert not down.retry(lost, "release_run", 0) and len(slept) == 5
    down.reached()
    assert said[-1] == "store reachable again after 10.0 s" and down.gave_up() == ""
    assert down.retry(lost, "beat", 0) and down.outages == 2  # a new outage, a new bound
    assert not down.retry(_dbapi(sqlite3.OperationalError("no such table: runs")), "beat", 0)
    assert not Outage(0.0, sleep=sleep).retry(lost, "beat", 0)  # 0: retries off


# -- every write is idempotent under a lost acknowledgement ------------------------------------


@contextmanager
def failing_commits(when: str) -> Iterator[list[int]]:
    """Every second commit of any session fails with a lost connection: ``after_commit``,
    once it has landed (the acknowledgement was lost); ``before_commit``, before (rolled
    back). So each transaction's first attempt fails and its retry succeeds. Yields the
    count of failures."""
    failed = [0]
    seen = [0]

    def fail(session: Session) -> None:
        seen[0] += 1
        if seen[0] % 2:
            failed[0] += 1
            raise _dbapi(sqlite3.OperationalError("database is locked"), invalidated=True)

    event.listen(Session, when, fail)
    try:
        yield failed
    finally:
        event.remove(Session, when, fail)


def _every_write(store: Store, helpers: Any) -> list[Any]:
    """One of each write method (what a driver does over a run's life), and what each
    returned; the reads in between check what the writes left."""
    answers: list[Any] = []
    run_id = store.create_run({"population": 2}, seed=3, task="t", driver="host:1:a")
    answers.append(len(run_id))
    answers.append(store.claim_run(run_id, "host:1:a"))
    seeds = [helpers.make_genome(f"seed{i}") for i in range(2)]
    answers.append(
        store.commit_generation(
            run_id,
            0,
            genomes=seeds,
            individuals=[IndividualIn(i, g.id, 10 + i) for i, g in enumerate(seeds)],
            evaluations=[
                EvaluationIn(g.id, "t", 5, 10 + i, "ok", {"loss": 1.0 + i}, individual=by_slot(i))
                for i, g in enumerate(seeds)
            ],
            members=[by_slot(0), by_slot(1)],
            policy=[PolicyIn("point", "", 1.0, 2.0)],
            archive=[ArchiveIn(seeds[0].id, {"loss": 1.0})],
            driver="host:1:a",
        )
    )
    first = answers[-1]
    answers[-1] = sorted(first)  # slots; ids are the database's (a rolled-back try uses some)
    lease = LeaseIn(seeds[0].id, "t", 5, 20, 1, "running", 30.0, worker="w")
    store.update_leases(run_id, [lease])
    store.update_leases(run_id, [LeaseIn(seeds[0].id, "t", 5, 20, 1, "done", 0.0)])
    answers.append(store.beat(run_id, "host:1:a"))
    child = helpers.make_genome("child")
    answers.append(
        store.commit_generation(
            run_id,
            1,
            genomes=[child],
            individuals=[IndividualIn(0, child.id, 20, operator="point", change={"op": "point"})],
            evaluations=[EvaluationIn(child.id, "t", 5, 20, "ok", {"loss": 0.5}, individual=by_slot(0))],
            lineage=[LineageIn(0, by_id(first[0]), "point", {"op": "point"})],
            members=[by_slot(0), by_id(first[0])],
            policy=[PolicyIn("point", "", 2.0, 3.0)],
            archive=[ArchiveIn(child.id, {"loss": 0.5})],
            archive_remove=[seeds[0].id],
            driver="host:1:a",
        )
    )
    born = answers[-1][0]
    answers[-1] = sorted(answers[-1])
    answers.append(store.put_artifact(run_id, born, "weights", helpers.safetensors_bytes([1.0, 2.0])))
    store.put_ladder(run_id, 1, [LadderRankIn(born, 1e6, loss=2.0, rank=1)])
    answers.append(store.reclaim_expired_leases(run_id))
    store.set_run_status(run_id, "finished", "done")
    store.release_run(run_id, "host:1:a")
    record = store.get_run(run_id)
    assert record is not None
    answers.append((record.status, record.last_generation, record.driver, record.evaluated))
    answers.append([(i.generation, i.slot, i.status) for i in store.individuals(run_id)])
    answers.append([(m.generation, m.slot, m.operator) for m in store.population(run_id)])
    answers.append(store.get_artifact(born, "weights"))
    answers.append([(a.genome_id, a.metrics) for a in store.archive(run_id)])
    answers.append([(p.operator, p.successes, p.trials) for p in store.policy(run_id)])
    answers.append([(r.individual_id == born, r.rank) for r in store.ladder(run_id)])
    answers.append([(r.attempt, r.state) for r in store.leases(run_id)])
    return answers


def _counts(store: Store, helpers: Any, url: str) -> dict[str, int]:
    return helpers.row_counts(url, (*TABLES, "leases", "ladder_ranks"))


@pytest.mark.parametrize("when", ["after_commit", "before_commit"])
def test_every_write_retried_after_a_lost_connection_loses_and_doubles_nothing(
    store_url: str, helpers: Any, when: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The store method by method, each write's first attempt failing once its commit has
    landed (or before it): the same answers and the same rows as with no failure."""
    monkeypatch.setattr(outage, "FIRST_SLEEP_S", 0.001)
    with Store(store_url) as clean:
        expected = _every_write(clean, helpers)
        expected_rows = _counts(clean, helpers, store_url)
    with _another_store(store_url) as url, Store(url, retry_seconds=30) as store:
        capsys.readouterr()
        with failing_commits(when) as failed:
            answers = _every_write(store, helpers)
        rows = _counts(store, helpers, url)
    assert answers == expected
    assert rows == expected_rows
    assert failed[0] >= 20  # every write and every read failed once
    err = capsys.readouterr().err.splitlines()
    assert sum("retrying for up to 30 s" in line for line in err) == failed[0]
    assert sum("store reachable again" in line for line in err) == failed[0]


@contextmanager
def _another_store(url: str) -> Iterator[str]:
    """A second empty store on the backend of ``url``."""
    if url.startswith("sqlite:///"):
        yield f"sqlite:///{Path(url.removeprefix('sqlite:///')).with_name('retried.db')}"
        return
    with scratch_database(postgres_or_skip()) as other:
        yield other


# -- SQLite locked past its busy timeout -------------------------------------------------------


def _hold_write_lock(db_path: Path, seconds: float) -> threading.Thread:
    """Another connection takes SQLite's write lock now and keeps it ``seconds``."""
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")

    def release() -> None:
        time.sleep(seconds)
        holder.execute("ROLLBACK")
        holder.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def test_sqlite_locked_past_the_busy_timeout_is_retried(db_path: Path, helpers: Any, capsys: Any) -> None:
    with Store(f"sqlite:///{db_path}", busy_timeout=0.2, retry_seconds=20) as store:
        run_id = store.create_run({}, seed=1, task="t")
        holder = _hold_write_lock(db_path, 1.5)  # 7 busy timeouts
        started = time.monotonic()
        assert _commit_one(store, helpers, run_id, 0)
        waited = time.monotonic() - started
        holder.join()
        assert 1.5 <= waited < 10
        record = store.get_run(run_id)
        assert record is not None and record.last_generation == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("evolve: store busy (database is locked) during commit_generation 0")
    assert err[0].endswith("retrying for up to 20 s")
    assert err[1].startswith("evolve: store reachable again after")


def test_past_the_bound_a_write_fails_in_one_line_and_the_store_goes_on(db_path: Path, helpers: Any) -> None:
    with Store(f"sqlite:///{db_path}", busy_timeout=0.1, retry_seconds=0.8) as store:
        run_id = store.create_run({}, seed=1, task="t")
        holder = _hold_write_lock(db_path, 2.5)
        started = time.monotonic()
        with pytest.raises(StoreError) as refused:
            _commit_one(store, helpers, run_id, 0)
        assert 0.8 <= time.monotonic() - started < 2.5
        message = str(refused.value)
        assert "\n" not in message and "database is locked" in message and "past the 0.8 s bound" in message
        holder.join()
        record = store.get_run(run_id)
        assert record is not None and record.last_generation == -1  # nothing half-written
        _commit_one(store, helpers, run_id, 0)  # once the lock is gone the run goes on
        record = store.get_run(run_id)
        assert record is not None and record.last_generation == 0
