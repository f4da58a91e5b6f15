"""Read and write transactions of the store, and how their failures are reported.

Every store method is one transaction: a write runs on the write engine (``BEGIN
IMMEDIATE`` on SQLite) and is run again whole when the database reports itself busy, so
the work passed in must be idempotent; a read runs on the read engine and sees one
consistent snapshot without asking for the write lock. Failures become a
:class:`~store.records.StoreError` with a one-line message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from dogma_evolve.store.records import StoreError

T = TypeVar("T")
WRITE_ATTEMPTS = 5
# PostgreSQL errors after which the whole transaction may simply run again:
# serialization_failure, deadlock_detected, lock_not_available.
_RETRY_SQLSTATES = {"40001", "40P01", "55P03"}
_DAMAGED = ("malformed", "not a database")


def one_line(exc: BaseException) -> str:
    """The first line of the database's own message, with a hint for a damaged file."""
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    line = message.splitlines()[0] if message else type(exc).__name__
    if any(word in line.lower() for word in _DAMAGED):
        line += " (the store file is damaged; it was left as it is)"
    return line


def is_busy(exc: DBAPIError) -> bool:
    """Whether the database refused for a lock or a conflict that a retry can outlast."""
    if getattr(exc.orig, "sqlstate", None) in _RETRY_SQLSTATES:
        return True
    message = str(exc.orig).lower()
    return isinstance(exc, OperationalError) and ("locked" in message or "busy" in message)


def retrying(attempt: Callable[[], T], what: str) -> T:
    """Run ``attempt`` (one whole transaction) until it is not refused as busy.

    The busy timeout already makes SQLite wait for the lock; should it still report the
    database busy, or PostgreSQL a serialization failure, the transaction runs again.
    """
    for number in range(WRITE_ATTEMPTS):
        try:
            return attempt()
        except DBAPIError as exc:
            if is_busy(exc) and number + 1 < WRITE_ATTEMPTS:
                time.sleep(0.1 * (number + 1))
                continue
            raise StoreError(f"{what}: {one_line(exc)}") from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"{what}: {one_line(exc)}") from exc
    raise AssertionError("unreachable")


def write(engine: Engine, work: Callable[[Session], T], what: str) -> T:
    """Run ``work`` in one write transaction, retried whole while the database is busy."""

    def attempt() -> T:
        with Session(engine, expire_on_commit=False) as session:
            with session.begin():
                return work(session)

    return retrying(attempt, what)


def read(engine: Engine, work: Callable[[Session], T], what: str) -> T:
    """Run ``work`` in one read transaction: one consistent snapshot, no write lock."""
    try:
        with Session(engine) as session:
            with session.begin():
                return work(session)
    except SQLAlchemyError as exc:
        raise StoreError(f"{what}: {one_line(exc)}") from exc
