"""Evaluation leases: which attempt of which evaluation is in flight, and what became of it.

The driver is the only writer of ``leases`` rows; workers only send it heartbeats. Its
news about an attempt is a :class:`store.LeaseIn` (``from store import LeaseIn``), upserted
by the evaluation's natural key plus the attempt number (:func:`update`). A lease that is
no longer running is final. Rows a dead driver left running are closed as ``expired`` when
the next driver takes the run over (in the claim's transaction: ``store.liveness.claim``),
or once their lease has passed (:func:`reclaim_expired`). A driver's attempts are numbered
after those earlier drivers stored for the same evaluation (:class:`LeaseLog`), so a resumed
run's retraining is recorded beside what came before.

``EvaluationPool(on_lease=LeaseLog(store, run_id))`` records every decision of the
evaluation pool (an attempt running, renewed, done, lost, expired, cancelled; see
``evaluation.pool``). The store does not import the evaluation package: an event is
anything with the fields of :class:`store.LeaseIn`, or a ``LeaseIn`` itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dogma_evolve.store.keys import StoredKey, fidelity_key, stored_key
from dogma_evolve.store.models import LEASE_STATES, Lease, Run, utcnow
from dogma_evolve.store.records import LeaseIn, LeaseRecord, StoreError

if TYPE_CHECKING:  # the Store imports this module for its lease methods
    from dogma_evolve.store.store import Store


class LeaseLog:
    """The driver's side of evaluation leases: pool events -> ``leases`` rows.

    Creating the log reclaims leases a previous driver of the run left running, so no row
    stays ``running`` once its lease has passed; ``reclaimed`` says how many. The pool
    numbers each evaluation's attempts from 0; an evaluation earlier drivers of the run
    already hold rows for (a resume training again what a killed driver had in flight) has
    its attempts numbered after theirs, so none of its rows is taken for another's.
    """

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.reclaimed = store.reclaim_expired_leases(run_id)
        self.first_attempt: dict[StoredKey, int] = {}
        for row in store.leases(run_id):
            key = stored_key(row)
            self.first_attempt[key] = max(self.first_attempt.get(key, 0), row.attempt + 1)

    def __call__(self, event: Any) -> None:
        news = as_lease(event)
        first = self.first_attempt.get(stored_key(news), 0)
        if first:
            news = replace(news, attempt=news.attempt + first)
        self.store.update_leases(self.run_id, [news])


def as_lease(event: Any) -> LeaseIn:
    """A :class:`LeaseIn` with the fields of ``event`` (a ``LeaseIn`` is kept as it is)."""
    if isinstance(event, LeaseIn):
        return event
    return LeaseIn(
        genome_id=event.genome_id,
        task=event.task,
        fidelity=event.fidelity,
        seed=event.seed,
        attempt=event.attempt,
        state=event.state,
        lease_s=event.lease_s,
        worker=event.worker,
        reason=event.reason,
    )


def check_state(state: str) -> None:
    if state not in LEASE_STATES:
        raise StoreError(f"lease state must be one of {LEASE_STATES}, not {state!r}")


def checked(updates: Iterable[LeaseIn]) -> list[LeaseIn]:
    """The updates as a list, each state and fidelity checked before any transaction."""
    batch = list(updates)
    for news in batch:
        check_state(news.state)
        fidelity_key(news.fidelity)
    return batch


def update(session: Session, run_id: str, batch: list[LeaseIn]) -> None:
    """Upsert the driver's news; a late heartbeat cannot reopen a lease that has ended."""
    if session.get(Run, run_id) is None:
        raise StoreError(f"no run {run_id!r}")
    now = utcnow()
    for news in batch:
        key = fidelity_key(news.fidelity)
        row = session.scalars(
            select(Lease).where(
                Lease.run_id == run_id,
                Lease.genome_id == news.genome_id,
                Lease.task == news.task,
                Lease.fidelity == key,
                Lease.seed == news.seed,
                Lease.attempt == news.attempt,
            )
        ).first()
        if row is None:
            row = Lease(
                run_id=run_id,
                genome_id=news.genome_id,
                task=news.task,
                fidelity=key,
                seed=news.seed,
                attempt=news.attempt,
                started=now,
            )
            session.add(row)
        elif row.state != "running":
            continue
        row.state = news.state
        row.heartbeat = now
        row.expires = now + timedelta(seconds=max(0.0, float(news.lease_s)))
        if news.worker is not None:
            row.worker = news.worker
        if news.reason is not None:
            row.reason = news.reason


def reclaim_expired(session: Session, run_id: str | None) -> int:
    """Mark running leases past their expiry (of one run, or all) ``expired``; count them."""
    query = select(Lease).where(Lease.state == "running", Lease.expires < utcnow())
    if run_id is not None:
        query = query.where(Lease.run_id == run_id)
    rows = session.scalars(query).all()
    for row in rows:
        row.state = "expired"
        row.reason = row.reason or "reclaimed: no heartbeat before the lease expired"
    return len(rows)


def records(session: Session, run_id: str, state: str | None) -> list[LeaseRecord]:
    """Leases of a run, oldest first; only those in ``state`` when it is given."""
    query = select(Lease).where(Lease.run_id == run_id)
    if state is not None:
        query = query.where(Lease.state == state)
    return [
        LeaseRecord(
            run_id=row.run_id,
            genome_id=row.genome_id,
            task=row.task,
            fidelity=json.loads(row.fidelity),
            seed=row.seed,
            attempt=row.attempt,
            state=row.state,
            worker=row.worker,
            reason=row.reason,
            started=row.started,
            heartbeat=row.heartbeat,
            expires=row.expires,
        )
        for row in session.scalars(query.order_by(Lease.id))
    ]
