"""The Ray pool every training command runs on (`evolve run`, `scale`, `ablate`, `run --ladder`),
built in one place: `EvaluationPool` with each attempt's lease logged to the run it belongs to.

``leases`` is one run id (every lease to that run: a search, an ablation) or a mapping of
evaluation's natural key (`store.keys.natural_key`) -> run id (one pool training the points of
several ladders, each lease to its point's run; keys it does not hold are not logged).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dogma_evolve.evaluation import EvaluationPool
    from dogma_evolve.store import LeaseIn, Store
    from dogma_evolve.store.keys import EvalKey as Key


class LeaseRouter:
    """``on_lease`` for one pool that trains for several runs: each lease goes to the run of
    the evaluation it belongs to."""

    def __init__(self, store: Store, owners: Mapping[Key, str]) -> None:
        from dogma_evolve.store import LeaseLog

        self.owners = dict(owners)
        self.logs = {run: LeaseLog(store, run) for run in set(self.owners.values())}

    def __call__(self, lease: LeaseIn) -> None:
        from dogma_evolve.store.keys import natural_key

        run = self.owners.get(natural_key(lease))
        if run is not None:
            self.logs[run](lease)


def ray_pool(
    store: Store,
    leases: str | Mapping[Key, str],
    workers: int | None,
    ray_address: str | None,
    timeout_s: float,
    **options: Any,
) -> EvaluationPool:
    """An unstarted `EvaluationPool` (use it as a context manager) with its leases logged to
    ``leases`` (module docstring); ``options`` go to `EvaluationPool` as they are."""
    from dogma_evolve.evaluation import EvaluationPool  # torch and Ray: loaded by the commands that train
    from dogma_evolve.store import LeaseLog

    on_lease: Any = LeaseLog(store, leases) if isinstance(leases, str) else LeaseRouter(store, leases)
    return EvaluationPool(
        workers=workers, ray_address=ray_address, timeout_s=timeout_s, on_lease=on_lease, **options
    )


__all__ = ["LeaseRouter", "ray_pool"]
