"""The driver's side of evaluation leases: pool events -> ``leases`` rows.

``EvaluationPool(on_lease=LeaseLog(store, run_id))`` records every decision of the pool
(an attempt running, renewed, done, lost, expired, cancelled; see ``evaluation.pool``).
Creating the log reclaims leases a previous driver of the run left running, so no row
stays ``running`` once its lease has passed. The store does not import the evaluation
package: an event is anything with the fields of :class:`store.LeaseIn`.
"""

from __future__ import annotations

from typing import Any

from store.records import LeaseIn
from store.store import Store


class LeaseLog:
    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.reclaimed = store.reclaim_expired_leases(run_id)

    def __call__(self, event: Any) -> None:
        self.store.update_leases(
            self.run_id,
            [
                LeaseIn(
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
            ],
        )
