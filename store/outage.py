"""Riding out a database that is briefly unreachable: which errors a retry can outlast, how
long the store keeps trying, and the lines that tell the user so.

A driver's search runs for hours or days; a PostgreSQL restart, a failover or a network
blip of a few seconds must not end it. Every transaction of a :class:`~store.Store` that
fails with a *transient* error (:func:`is_transient`: the connection was refused, closed or
reset, the server is shutting down or starting up; SQLite still locked after its busy
timeout) is run again whole, on a fresh connection, with exponential backoff
(:data:`FIRST_SLEEP_S` doubling up to :data:`MAX_SLEEP_S` per sleep) for as long as the
store has been unreachable less than its bound, :func:`retry_seconds` (a ``Store``
argument, else :data:`RETRY_SECONDS_ENV`, else :data:`DEFAULT_RETRY_SECONDS`; 0 turns the
retries off). Past the bound the error is the one-line :class:`~store.records.StoreError`
it always was.

The bound is the outage's, not each call's: :class:`Outage` remembers when the store was
last found unreachable, so once it has been down longer than the bound every call fails
at its first error (a driver giving up does not wait the bound again to release its run).
Any transaction that succeeds ends the outage. One line goes to stderr when an outage
begins and one when it ends.

Running a transaction again is safe only because every write of the store is idempotent
when its first attempt did land (the commit reached the server but its acknowledgement
was lost): docs/reference/store.md, "Riding out an outage", and
``tests/store/test_outage.py`` say which key makes each write so. Errors that a retry
cannot change (a broken constraint, bad SQL, a refusal of the store's own) are never
retried.

A full disk is one of those (:func:`is_disk_full`: SQLite's SQLITE_FULL, PostgreSQL's
disk_full, an ``OSError`` ENOSPC or EDQUOT): the database rolled the transaction back, and
running it again fails the same way until someone frees space. It is a :class:`StoreFull`
at once, whose one line names the store's file or database (``transactions.one_line``).
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from dogma_evolve.store.records import StoreError

RETRY_SECONDS_ENV = "EVOLVE_STORE_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 180.0
FIRST_SLEEP_S = 0.5
MAX_SLEEP_S = 5.0

# PostgreSQL SQLSTATEs of a server that is going away or not there yet: admin_shutdown,
# crash_shutdown, cannot_connect_now (starting up, shutting down, in recovery); and the
# whole class 08, connection exceptions.
_GOING_AWAY = {"57P01", "57P02", "57P03"}
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")
# A file system with no room left: PostgreSQL's disk_full, SQLite's SQLITE_FULL (its
# message, for a driver that does not set the code), the kernel's ENOSPC and EDQUOT.
_DISK_FULL_SQLSTATE = "53100"
_SQLITE_FULL = 13
_SQLITE_FULL_MESSAGE = "database or disk is full"
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class StoreFull(StoreError):
    """A transaction failed because the file system holding the database is full: it was
    rolled back whole; nothing of it was written. Not retried (module docstring)."""


def retry_seconds(value: float | None = None) -> float:
    """The bound in seconds: ``value`` when given, else :data:`RETRY_SECONDS_ENV`, else
    :data:`DEFAULT_RETRY_SECONDS`. A negative or non-numeric setting is refused."""
    source = "retry_seconds"
    if value is None:
        text = os.environ.get(RETRY_SECONDS_ENV, "").strip()
        if not text:
            return DEFAULT_RETRY_SECONDS
        source = RETRY_SECONDS_ENV
        try:
            value = float(text)
        except ValueError:
            raise StoreError(f"{RETRY_SECONDS_ENV} must be a number of seconds, not {text!r:.40}") from None
    if not value >= 0.0 or value == float("inf"):
        raise StoreError(f"{source} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached or kept, rather than that the
    work was wrong: a retry on a new connection, a little later, may succeed."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:  # SQLAlchemy's own verdict: the connection is gone
        return True
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and (sqlstate.startswith("08") or sqlstate in _GOING_AWAY):
        return True
    message = str(orig).lower()
    if _is_sqlite(orig):
        return isinstance(exc, OperationalError) and any(busy in message for busy in _SQLITE_BUSY)
    # psycopg reports a failure of the connection itself (refused, reset, closed by the
    # server) as an OperationalError without a SQLSTATE, and a closed connection used
    # again as an InterfaceError; the server's own refusals always carry a SQLSTATE.
    return isinstance(exc, (OperationalError, InterfaceError)) and sqlstate is None


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it wraps) says the disk holding the database is full."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
            return True
        if getattr(error, "sqlstate", None) == _DISK_FULL_SQLSTATE:
            return True
        code = getattr(error, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF == _SQLITE_FULL:
            return True
        if _is_sqlite(error) and _SQLITE_FULL_MESSAGE in str(error).lower():
            return True
        pending += [getattr(error, "orig", None), error.__cause__, error.__context__]
    return False


def _is_sqlite(orig: BaseException | None) -> bool:
    return type(orig).__module__.startswith("sqlite3")


class Outage:
    """Whether a store's database is reachable, and how long it has not been (module
    docstring). Shared by every thread of one :class:`~store.Store`.

    ``say`` gets the two lines (stderr by default); ``clock`` and ``sleep`` are the time
    (tests replace them)."""

    def __init__(
        self,
        bound_s: float,
        *,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bound_s = bound_s
        self._say = say or _to_stderr
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self.since: float | None = None  # when the current outage was first met
        self.outages = 0  # how many began (tests and reports)

    def retry(self, exc: BaseException, what: str, attempt: int) -> bool:
        """After ``attempt`` (0, 1, ...) of a transaction failed with ``exc``: sleep and
        return True when it should run again, or return False (at once) when ``exc`` is
        not transient or the outage has lasted its bound."""
        if self.bound_s <= 0 or not is_transient(exc):
            return False
        now = self._clock()
        with self._lock:
            if self.since is None:
                self.since = now
                self.outages += 1
                kind = "busy" if _is_sqlite(getattr(exc, "orig", None)) else "unreachable"
                self._say(
                    f"store {kind} ({one_line_of(exc)}) during {what}; retrying for up to {self.bound_s:g} s"
                )
            left = self.since + self.bound_s - now
        if left <= 0:
            return False
        self._sleep(min(FIRST_SLEEP_S * 2**attempt, MAX_SLEEP_S, left))
        return True

    def gave_up(self) -> str:
        """What to add to the error of a transaction that ran out of retries ("" if none)."""
        with self._lock:
            if self.since is None:
                return ""
            lasted = self._clock() - self.since
        return f" (store unreachable for {lasted:.0f} s, past the {self.bound_s:g} s bound)"

    def reached(self) -> None:
        """A transaction succeeded: an outage in progress is over."""
        if self.since is None:  # the common case, without the lock
            return
        with self._lock:
            since, self.since = self.since, None
        if since is not None:  # another thread may have ended it first
            self._say(f"store reachable again after {self._clock() - since:.1f} s")


def one_line_of(exc: BaseException) -> str:
    """The first line of the database's message (no hint: see ``transactions.one_line``)."""
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def _to_stderr(line: str) -> None:
    print(f"evolve: {line}", file=sys.stderr, flush=True)
