"""Read and write transactions of the store, and how their failures are reported.

Every store method is one transaction: a write runs on the write engine (``BEGIN
IMMEDIATE`` on SQLite), a read on the read engine, where it sees one consistent snapshot
without asking for the write lock. A transaction is run again whole, on a new session and
connection (the pool's pre-ping replaces a connection the server closed), when

* PostgreSQL refuses it for a conflict (serialization failure, deadlock, lock not
  available): at once, up to :data:`WRITE_ATTEMPTS` times;
* the database is unreachable or, on SQLite, still locked after the busy timeout: with
  backoff for as long as the store's :class:`~store.outage.Outage` allows (its bound,
  ``EVOLVE_STORE_RETRY_SECONDS``, 180 s by default).

So the work passed in must be idempotent, also when its first attempt committed and only
the acknowledgement was lost (``tests/store/test_outage.py`` shows each write is). Other
failures become a :class:`~store.records.StoreError` with a one-line message at once; a
full disk (:func:`store.outage.is_disk_full`) a :class:`~store.outage.StoreFull` at once,
whose line names the store's file (or database) and says nothing of the transaction was written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session

from dogma_evolve.store.outage import Outage, StoreFull, is_disk_full, is_transient, one_line_of
from dogma_evolve.store.records import StoreError

T = TypeVar("T")
WRITE_ATTEMPTS = 5
# PostgreSQL errors after which the whole transaction may simply run again:
# serialization_failure, deadlock_detected, lock_not_available.
_RETRY_SQLSTATES = {"40001", "40P01", "55P03"}
_DAMAGED = ("malformed", "not a database")


def one_line(exc: BaseException, where: str = "") -> str:
    """The first line of the database's own message, with a hint for a damaged file or,
    for a full disk, the store it holds (``where``: the SQLite file or the database)."""
    line = one_line_of(exc)
    if is_disk_full(exc):
        store = f"the store {where}" if where else "the store"
        return (
            f"the file system holding {store} is full ({line}): the transaction was rolled back, "
            "nothing of it written; free space there, then run the command again"
        )
    if any(word in line.lower() for word in _DAMAGED):
        line += " (the store file is damaged; it was left as it is)"
    return line


def where_of(engine: Engine) -> str:
    """What a full-disk line names: the SQLite file's absolute path, else the database."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return os.path.abspath(url.database)
    return url.render_as_string(hide_password=True)


def is_busy(exc: DBAPIError, outage: Outage | None) -> bool:
    """Whether the transaction may run again at once: PostgreSQL refused it for a conflict
    that running it again resolves, or SQLite was still locked after the busy timeout and
    no ``outage`` bound rides that out with backoff instead."""
    if getattr(exc.orig, "sqlstate", None) in _RETRY_SQLSTATES:
        return True
    message = str(exc.orig).lower()
    locked = is_transient(exc) and ("locked" in message or "busy" in message)
    return locked and (outage is None or outage.bound_s <= 0)


def retrying(attempt: Callable[[], T], what: str, outage: Outage | None = None, where: str = "") -> T:
    """Run ``attempt`` (one whole transaction) until it succeeds or fails for good.

    A conflict runs again at once (:data:`WRITE_ATTEMPTS` in all, as does a locked SQLite
    file when there is no ``outage`` bound); a transient error
    (:func:`store.outage.is_transient`) runs again while ``outage`` allows, which sleeps
    between attempts; without an ``outage`` it fails at once (no bound to keep). A full
    disk fails at once, a :class:`~store.outage.StoreFull` naming ``where``.
    """
    conflicts = 0
    number = 0
    while True:
        try:
            result = attempt()
        except DBAPIError as exc:
            if is_disk_full(exc):  # rolled back; running it again fails alike until space is freed
                raise StoreFull(f"{what}: {one_line(exc, where)}") from exc
            if is_busy(exc, outage) and conflicts + 1 < WRITE_ATTEMPTS:
                conflicts += 1
                time.sleep(0.1 * conflicts)
                continue
            if outage is not None and outage.retry(exc, what, number):
                number += 1
                continue
            suffix = outage.gave_up() if outage is not None and is_transient(exc) else ""
            raise StoreError(f"{what}: {one_line(exc)}{suffix}") from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"{what}: {one_line(exc)}") from exc
        if outage is not None:
            outage.reached()
        return result


def write(engine: Engine, work: Callable[[Session], T], what: str, outage: Outage | None = None) -> T:
    """Run ``work`` in one write transaction, run again whole as :func:`retrying` says."""

    def attempt() -> T:
        with Session(engine, expire_on_commit=False) as session:
            with session.begin():
                return work(session)

    return retrying(attempt, what, outage, where_of(engine))


def read(engine: Engine, work: Callable[[Session], T], what: str, outage: Outage | None = None) -> T:
    """Run ``work`` in one read transaction: one consistent snapshot, no write lock; run
    again while the database is unreachable and ``outage`` allows."""

    def attempt() -> T:
        with Session(engine) as session:
            with session.begin():
                return work(session)

    return retrying(attempt, what, outage, where_of(engine))
