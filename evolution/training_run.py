"""A run whose generations are trainings, not a search: `evolve scale`'s ladders and `evolve
ablate`'s variants (the `Recorder` of each is this class with its own points).

The run is identified by its config: ``kind`` and one identifying entry (a ladder's
``"ladder"``, an ablation's ``"ablation"``); the same command finds its run again and resumes
it (expired leases reclaimed), else creates it. Every point is one evaluation under the
store's natural key ``(genome id, task, steps, seed)``:

* ``lookup`` settles the points the store holds: in this run whatever their status (the key
  is unique in a run); a successful row of another run trained in this run's precision, and
  with no plugin code (``metrics["plugins"]``) other than the one loaded here, is
  copied (``cached_from``, as the engine's cache does) in one generation, not retrained;
* ``record`` commits one trained point as the run's next generation: a birth (operator
  None, ``change`` saying what the point is) and its evaluation row, so a killed command
  loses at most the trainings in flight;
* ``finish`` marks the run finished, or failed when its training raised.

The recorder drives its run (`store.liveness`): it claims the run when it creates or finds
it (a second command on a run whose driver is alive is refused, `RunHeld`), beats while it
lives, and releases the run in ``finish``; each point's commit is fenced by that claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.evaluation.precision import precision_of
from dogma_evolve.genome import Genome
from dogma_evolve.store import EvaluationIn, IndividualIn, Store, by_slot
from dogma_evolve.store.keys import EvalKey, natural_key
from dogma_evolve.store.liveness import Heartbeat

Row = tuple[Any, str, dict[str, Any], str | None, float]  # point, status, metrics, reason, seconds


class TrainingRecorder:
    """A training run in the store (module docstring); subclasses say each point's key, its
    genome and its ``change`` record. A point has ``genome_id``, ``seed``, ``evaluation_id``
    and ``settle(status, metrics, origin)``."""

    def __init__(
        self, store: Store, kind: str, config: dict[str, Any], entry: str, task: str, precision: str
    ) -> None:
        self.store, self.precision = store, precision
        key = config[entry]
        found = [r for r in store.list_runs(kind) if r.config.get(entry) == key]
        if found:
            run = max(found, key=lambda r: r.created)
            self.run_id, self.next_generation, self.resumed = run.id, run.last_generation + 1, True
            store.reclaim_expired_leases(run.id)
        else:
            self.run_id = store.create_run(config, seed=0, task=task, kind=kind)
            self.next_generation, self.resumed = 0, False
        self.liveness = Heartbeat(store, self.run_id)
        self.liveness.__enter__()  # held until `finish` (the commands call it in a finally)

    def point_key(self, point: Any) -> EvalKey:
        raise NotImplementedError

    def genome_of(self, point: Any) -> Genome:
        raise NotImplementedError

    def change_of(self, point: Any) -> dict[str, Any]:
        raise NotImplementedError

    def lookup_points(self, points: list[Any]) -> list[Any]:
        """Settle the ``points`` the store already holds; return those still to train."""
        from dogma_evolve.phenotype.plugins import pinned_loaded  # torch, as the training

        loaded = set(pinned_loaded())
        todo, copies = [], []
        for p in points:
            rec = self.store.find_evaluation(*self.point_key(p), run_id=self.run_id)
            if rec is not None:
                p.settle(rec.status, rec.metrics, "stored")
                p.evaluation_id = rec.id
                continue
            rec = self.store.find_evaluation(*self.point_key(p))
            if (
                rec is not None
                and rec.status == "ok"
                and precision_of(rec.metrics) == self.precision
                and set(rec.metrics.get("plugins") or ()) <= loaded  # no other plugin code's result
            ):
                metrics = {k: v for k, v in rec.metrics.items() if k != "cached_from"}
                p.settle(rec.status, metrics, "copied")
                copies.append((p, "ok", {**metrics, "cached_from": rec.id}, rec.reason, 0.0))
                continue
            todo.append(p)
        if copies:
            self._commit(copies)
        return todo

    def request(self, point: Any, timeout_s: float) -> EvalRequest:
        """The pool's request that trains ``point``: its key, its genome, this run's precision."""
        from dogma_evolve.phenotype.plugins import pinned_loaded  # torch, as the training

        genome_id, task, steps, seed = self.point_key(point)
        return EvalRequest(
            genome_yaml=self.genome_of(point).to_yaml(),
            genome_id=genome_id,
            task=task,
            fidelity=steps,
            seed=seed,
            timeout_s=timeout_s,
            precision=self.precision,
            plugins=pinned_loaded(),  # the block kinds this command imported, for the workers
        )

    def train_points(
        self,
        todo: Sequence[Any],
        pool: Any,
        timeout_s: float,
        on_point: Callable[[Any, int, int], None] | None = None,
    ) -> None:
        """Train ``todo`` on ``pool`` in the given order, committing each result as it
        arrives (``record``); ``on_point(point, done, total)`` after each."""
        by_key = {self.point_key(p): p for p in todo}
        done = 0

        def on_result(result: EvalResult) -> None:
            nonlocal done
            p = by_key[natural_key(result)]
            self.record(p, result)
            done += 1
            if on_point is not None:
                on_point(p, done, len(todo))

        if todo:
            pool.evaluate([self.request(p, timeout_s) for p in todo], on_result=on_result)

    def record(self, point: Any, result: EvalResult, copied_from: int | None = None) -> None:
        """Commit one trained point as the run's next generation (``copied_from``: the row of
        another run that trained the same key in this invocation)."""
        metrics = dict(result.metrics)
        if copied_from is not None:
            metrics["cached_from"] = copied_from
        point.settle(result.status, result.metrics, "trained" if copied_from is None else "copied")
        self._commit([(point, result.status, metrics, result.reason or None, result.wall_seconds)])

    def _commit(self, rows: list[Row]) -> None:
        genomes = {g.id: g for g in (self.genome_of(p) for p, *_ in rows)}
        self.store.commit_generation(
            self.run_id,
            self.next_generation,
            genomes=[(g.id, g.to_yaml(), g.sequence_view()) for g in genomes.values()],
            individuals=[
                IndividualIn(slot, p.genome_id, p.seed, None, self.change_of(p))
                for slot, (p, *_) in enumerate(rows)
            ],
            evaluations=[
                EvaluationIn(*self.point_key(p), status, metrics, reason, seconds, individual=by_slot(slot))
                for slot, (p, status, metrics, reason, seconds) in enumerate(rows)
            ],
            members=[by_slot(slot) for slot in range(len(rows))],
            driver=self.liveness.driver,
        )
        self.next_generation += 1
        for p, *_ in rows:
            rec = self.store.find_evaluation(*self.point_key(p), run_id=self.run_id)
            p.evaluation_id = rec.id if rec is not None else None

    def finish(self, failed: bool) -> None:
        """Mark the run finished (or failed) and release it."""
        try:
            self.store.set_run_status(self.run_id, "failed" if failed else "finished")
        finally:
            self.liveness.__exit__(None, None, None)


__all__ = ["TrainingRecorder"]
