"""Runs know they are dead: the driver of a run holds it and beats; a silent one has stopped.

A run's driver (the one process that commits its generations) *claims* the run
(``runs.driver``, ``runs.heartbeat``; revision 0007) when it creates or resumes it, refreshes
the heartbeat every :data:`BEAT_EVERY_S` seconds while it works, and *releases* the run (both
columns back to NULL) when it stops, however it stops. The contract:

* **claim** (:func:`claim`, ``Store.claim_run``): one write transaction that locks the run's
  row (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already holds
  the database's one write lock) and takes the run when it has no driver, when its driver's
  heartbeat is older than ``stale_after_s`` or its driver is a process of this host that no
  longer exists (:func:`gone_here`: the driver died, its claim is taken over), or
  when the driver is the same token (a re-claim refreshes the heartbeat). Otherwise it raises
  :class:`RunHeld`, naming the live driver and its heartbeat's age. A claim that takes the
  run (from a dead driver, or from none) closes the leases still ``running`` in the same
  transaction (:func:`abandon_leases`): the attempts earlier drivers left in flight;
  the new driver trains them anew;
* **beat** (:func:`beat`): refreshes the heartbeat only while the token still holds the run;
  a driver whose claim was taken over learns so (False) and must stop committing;
* **release** (:func:`release`): clears both columns when the token holds the run;
* **fence**: ``Store.commit_generation(..., driver=token)`` checks in the generation's own
  transaction that the token still holds the run, so a driver that lost its claim (it was
  silent past the stale limit and another driver took over) can never commit a generation.

Readers derive the *shown* status (:func:`shown_status`): a run stored ``running`` whose
heartbeat is older than :data:`STALE_AFTER_S`, or that has none (a released run, or one of
a store before revision 0007), is shown :data:`INTERRUPTED`: nobody drives it, ``evolve run
--resume RUN`` continues it. ``interrupted`` is never stored: a killed driver cannot write
it, so readers must derive it from the heartbeat anyway, and one rule then covers a kill, a
crash and a Ctrl-C alike.

Times are the writers' clocks (UTC): drivers and readers on several hosts must keep their
clocks within a small part of :data:`STALE_AFTER_S` of each other.

:class:`Heartbeat` is the driver's side: a context manager that claims the run on entry,
beats from a daemon thread (stopped by a :class:`threading.Event`) and releases on exit.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from dogma_evolve.store.models import Lease, Run, utcnow
from dogma_evolve.store.records import StoreError

if TYPE_CHECKING:  # the Store imports this module for its liveness methods
    from dogma_evolve.store.store import Store

#: Seconds between two heartbeats of a run's driver.
BEAT_EVERY_S = 10.0
#: A driver whose heartbeat is older than this many seconds has stopped: readers show its run
#: ``interrupted`` and another driver may take the run over. Six missed beats: a driver
#: stalled by a loaded machine (or a long garbage collection) is not declared dead.
STALE_AFTER_S = 60.0
#: The status readers show for a run stored ``running`` that nobody drives.
INTERRUPTED = "interrupted"
#: Longest driver token kept (``runs.driver`` is a 255-character string).
DRIVER_LENGTH = 255


class RunHeld(StoreError):
    """A claim refused: another driver holds the run and its heartbeat is fresh."""

    def __init__(self, run_id: str, driver: str, age_s: float, stale_after_s: float) -> None:
        self.run_id, self.driver, self.age_s = run_id, driver, age_s
        super().__init__(
            f"run {run_id} is held by the live driver {driver} (last heartbeat {age_s:.0f} s ago; "
            f"a driver silent for {stale_after_s:.0f} s counts as stopped)"
        )


class RunLost(StoreError):
    """A driver's claim is gone: another driver took the run over, or it was released."""


def driver_token() -> str:
    """A new token naming this driver: ``host:pid:random`` (random: two drivers of one
    process are two drivers)."""
    host = socket.gethostname()[:160] or "host"
    return f"{host}:{os.getpid()}:{secrets.token_hex(4)}"


def gone_here(driver: str) -> bool:
    """Whether ``driver`` (a :func:`driver_token`) names a process of this host that no longer
    exists: a driver killed here (SIGKILL, a crash) is known dead at once, without waiting
    :data:`STALE_AFTER_S` for its heartbeat to go stale. A driver of another host, or a token
    of another form, is not judged here (False)."""
    host, _, rest = driver.partition(":")
    pid_text = rest.partition(":")[0]
    if host != (socket.gethostname()[:160] or "host") or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False  # this process: another driver of it is alive while we run
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, under another user
        return False
    return False


def age_s(heartbeat: datetime | None, now: datetime | None = None) -> float | None:
    """Seconds since ``heartbeat`` (None: there is none). A heartbeat from a clock ahead of
    ``now`` counts as fresh (0)."""
    if heartbeat is None:
        return None
    return max(0.0, ((now or utcnow()) - heartbeat).total_seconds())


def is_live(
    heartbeat: datetime | None, now: datetime | None = None, stale_after_s: float = STALE_AFTER_S
) -> bool:
    """Whether a driver that beat at ``heartbeat`` still counts as alive at ``now``."""
    age = age_s(heartbeat, now)
    return age is not None and age <= stale_after_s


def driver_alive(
    driver: str | None,
    heartbeat: datetime | None,
    now: datetime | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> bool:
    """Whether a run's driver is alive: there is one, its heartbeat is fresh (:func:`is_live`)
    and it is not a process of this host that is gone (:func:`gone_here`)."""
    return driver is not None and is_live(heartbeat, now, stale_after_s) and not gone_here(driver)


def shown_status(
    status: str,
    heartbeat: datetime | None,
    now: datetime | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> str:
    """The status a reader shows: the stored one, except that a ``running`` run whose
    driver is not alive (:func:`is_live`) is :data:`INTERRUPTED`."""
    if status == "running" and not is_live(heartbeat, now, stale_after_s):
        return INTERRUPTED
    return status


# -- the transactions (each takes the session of one write transaction) -----------------------


def _locked_run(session: Session, run_id: str) -> Run:
    """The run's row, locked until the transaction ends (FOR UPDATE; a no-op on SQLite,
    whose write transaction already excludes every other writer)."""
    row = session.scalars(select(Run).where(Run.id == run_id).with_for_update()).first()
    if row is None:
        raise StoreError(f"no run {run_id!r}")
    return row


def claim(
    session: Session, run_id: str, driver: str, stale_after_s: float, now: datetime | None
) -> str | None:
    """Take the run for ``driver`` (see the module's contract); return the stale driver it
    was taken over from, None when the run had none (or ``driver`` already held it)."""
    if not driver or len(driver) > DRIVER_LENGTH:
        raise StoreError(f"a driver token must be 1 to {DRIVER_LENGTH} characters, not {len(driver)}")
    now = now or utcnow()
    row = _locked_run(session, run_id)
    previous = row.driver
    if (
        previous is not None
        and previous != driver
        and driver_alive(previous, row.heartbeat, now, stale_after_s)
    ):
        raise RunHeld(run_id, previous, age_s(row.heartbeat, now) or 0.0, stale_after_s)
    if previous != driver:
        was = f"its driver {previous} stopped" if previous else "its run had no driver"
        abandon_leases(session, run_id, f"abandoned: {was}; the run was taken by {driver}")
    row.driver, row.heartbeat = driver, now
    return previous if previous != driver else None


def abandon_leases(session: Session, run_id: str, reason: str) -> int:
    """Close every lease of the run still ``running`` as ``expired`` with ``reason``; count
    them. For a claim that takes the run over: the attempts its earlier drivers left in
    flight have nobody to finish or retry them (the new driver trains them anew)."""
    rows = session.scalars(select(Lease).where(Lease.run_id == run_id, Lease.state == "running")).all()
    for row in rows:
        row.state = "expired"
        row.reason = reason
    return len(rows)


def beat(session: Session, run_id: str, driver: str, now: datetime | None) -> bool:
    """Refresh the heartbeat if ``driver`` holds the run; whether it does."""
    row = _locked_run(session, run_id)
    if row.driver != driver:
        return False
    row.heartbeat = now or utcnow()
    return True


def release(session: Session, run_id: str, driver: str) -> bool:
    """Clear the claim if ``driver`` holds the run; whether it did."""
    row = _locked_run(session, run_id)
    if row.driver != driver:
        return False
    row.driver, row.heartbeat = None, None
    return True


def check_holder(session: Session, run_id: str, driver: str) -> None:
    """Raise :class:`RunLost` unless ``driver`` holds the run (the commit's fence)."""
    row = _locked_run(session, run_id)
    if row.driver != driver:
        holder = f"driven by {row.driver}" if row.driver else "released"
        raise RunLost(f"run {run_id} is now {holder}, not by {driver}: this driver lost it and stops")


# -- the driver's side ------------------------------------------------------------------------


class Heartbeat:
    """A driver's hold on a run: claim on entry, beat from a daemon thread, release on exit.

    ``with Heartbeat(store, run_id):`` claims the run (raising :class:`RunHeld` when a live
    driver holds it), beats every ``every_s`` seconds until the block ends, then releases
    the run, whether the block returned or raised (KeyboardInterrupt too). Entering again
    while inside (the engine's loop inside the command's block) only counts the depth: one
    thread, one release, at the outermost exit. :meth:`claim` takes the run without beating
    (a resume refused before any work starts). ``driver`` is the token written to
    ``runs.driver`` (:func:`driver_token` by default).

    ``lost`` is None while the claim holds; once a beat finds the run taken over it says so
    and the thread stops (the commit's fence then refuses this driver's next generation).
    ``error``: the last failed beat's message (a beat that fails is tried again next time).
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        driver: str | None = None,
        *,
        every_s: float = BEAT_EVERY_S,
        stale_after_s: float = STALE_AFTER_S,
    ) -> None:
        self.store, self.run_id = store, run_id
        self.driver = driver or driver_token()
        self.every_s, self.stale_after_s = every_s, stale_after_s
        self.lost: str | None = None
        self.error: str | None = None
        self._depth = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self) -> None:
        """Take (or refresh) the run for this driver now; :class:`RunHeld` when refused."""
        self.store.claim_run(self.run_id, self.driver, self.stale_after_s)

    def __enter__(self) -> Heartbeat:
        if self._depth == 0:
            self.claim()
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._beat_until_stopped, name=f"heartbeat {self.run_id}", daemon=True
            )
            self._thread.start()
        self._depth += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._depth -= 1
        if self._depth > 0:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.release()

    def release(self) -> None:
        """Give the run up (nothing when this driver no longer holds it)."""
        try:
            self.store.release_run(self.run_id, self.driver)
        except StoreError as e:  # the store is gone: the claim goes stale by itself
            self.error = str(e)

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                held = self.store.beat(self.run_id, self.driver)
            except StoreError as e:  # a busy or unreachable database: try again next time
                self.error = str(e)
                continue
            if not held:
                self.lost = f"run {self.run_id} was taken over or released: driver {self.driver} lost it"
                return
