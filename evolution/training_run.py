"""A run whose generations are trainings, not a search: `evolve scale`'s ladders, `evolve
ablate`'s variants and `evolve calibrate`'s panel, driven here, in one place.

Each command plans its trainings as points (:class:`Point`, each with its plan's coordinates: a
variant and replicate, a member and fidelity, a rung, budget and replicate) and records them
in a :class:`TrainingRecorder` subclass that says each point's genome and ``change`` record.

The run is identified by its config: ``kind`` and one identifying entry (a ladder's
``"ladder"``, an ablation's ``"ablation"``, a calibration's ``"calibration"``); the same
command finds its run again and resumes it (expired leases reclaimed), else creates it.
Every point is one evaluation under the store's natural key (`store.keys.natural_key`:
genome id, task, steps as the fidelity, seed):

* ``lookup`` settles the points the store holds, by the engine's own cache look-up
  (`rules.cache_answer`): in this run whatever their status (the key is unique in a run); a
  successful row of another run that the one cache rule (`rules.reusable`) lets be reused,
  trained in this run's precision and with no plugin code (``metrics["plugins"]``) other
  than the one loaded here, is copied (``cached_from``) in one generation, not retrained;
  unlike the engine, which reuses a failure too, a failed row of another run is trained
  again here;
* :func:`train_recorded` trains the rest on the pool it opens (only when there is something
  to train), in the order given, a key several points share (two ladders' runs) once: each
  result is committed as it arrives (``record``), as the run's next generation: a birth
  (operator None, ``change`` saying what the point is) and its evaluation row, so a killed
  command loses at most the trainings in flight; the other points of the key get a copy
  marked ``cached_from``;
* then every recorder's run is marked finished, or failed when training raised (``finish``);
  an environment failure (`evaluation.environment`) is no point's result: training stops,
  nothing is recorded for it, and the run stays resumable.

The recorder drives its run (`store.liveness`): it claims the run when it creates or finds
it (a second command on a run whose driver is alive is refused, `RunHeld`), beats while it
lives, and releases the run in ``finish``; each point's commit is fenced by that claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.evaluation.environment import EnvironmentFailure, is_environment
from dogma_evolve.evolution.rules import cache_answer
from dogma_evolve.genome import Genome
from dogma_evolve.store import EvaluationIn, IndividualIn, RunRecord, Store, by_slot
from dogma_evolve.store.keys import EvalKey, natural_key
from dogma_evolve.store.liveness import Heartbeat

OnPoint = Callable[[Any, Any, int, int], None]  # (recorder, point, done, total)


@dataclass
class Point:
    """One training of a training run and, once known, its outcome: ``status`` and
    ``metrics``, ``origin`` ("stored", "copied" from another run, "trained") and the
    ``evaluation_id`` of its row in the run. A command's points subclass it with their
    plan's coordinates (keyword fields)."""

    genome_id: str
    task: str
    steps: int
    seed: int
    status: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    origin: str = ""
    evaluation_id: int | None = None

    @property
    def fidelity(self) -> int:
        """The point's fidelity, its steps (what the store's key calls it)."""
        return self.steps

    def key(self) -> EvalKey:
        """The point's natural key (`store.keys.natural_key`)."""
        return natural_key(self)

    def settle(self, status: str, metrics: dict[str, Any], origin: str) -> None:
        self.status, self.metrics, self.origin = status, dict(metrics), origin


R = TypeVar("R", bound="TrainingRecorder")
Row = tuple[Point, str, dict[str, Any], str | None, float]  # point, status, metrics, reason, seconds


def newest_run(store: Store, kind: str, entry: str, key: Any) -> RunRecord | None:
    """The newest stored run of ``kind`` whose config's ``entry`` is ``key`` (None if none): the
    training run a recorder of that key resumes, and the one its readers look in."""
    found = [r for r in store.list_runs(kind) if r.config.get(entry) == key]
    return max(found, key=lambda r: r.created) if found else None


class TrainingRecorder:
    """A training run in the store (module docstring) of ``points``, each trained within
    ``timeout_s``; subclasses say each point's genome (``genome_of``) and its birth's
    ``change`` record (``change_of``)."""

    def __init__(
        self,
        store: Store,
        kind: str,
        config: dict[str, Any],
        entry: str,
        task: str,
        precision: str,
        points: Sequence[Point],
        timeout_s: float,
    ) -> None:
        self.store, self.precision = store, precision
        self.points, self.timeout_s = list(points), timeout_s
        run = newest_run(store, kind, entry, config[entry])
        if run is not None:
            self.run_id, self.next_generation, self.resumed = run.id, run.last_generation + 1, True
            store.reclaim_expired_leases(run.id)
        else:
            self.run_id = store.create_run(config, seed=0, task=task, kind=kind)
            self.next_generation, self.resumed = 0, False
        self.liveness = Heartbeat(store, self.run_id)
        self.liveness.__enter__()  # held until `finish` (`train_recorded` calls it in a finally)

    def genome_of(self, point: Any) -> Genome:
        raise NotImplementedError

    def change_of(self, point: Any) -> dict[str, Any]:
        raise NotImplementedError

    def lookup(self) -> list[Any]:
        """Settle the points the store already holds (`rules.cache_answer`, the engine's
        cache look-up; of another run only a successful row); return those still to train."""
        from dogma_evolve.phenotype.plugins import pinned_loaded  # torch, as the training

        loaded = set(pinned_loaded())
        todo, copies = [], []
        for p in self.points:
            rec, here = cache_answer(self.store, p.key(), self.run_id, self.precision, loaded)
            if rec is not None and here:
                p.settle(rec.status, rec.metrics, "stored")
                p.evaluation_id = rec.id
                continue
            if rec is not None and rec.status == "ok":  # of another run: a success only
                metrics = {k: v for k, v in rec.metrics.items() if k != "cached_from"}
                p.settle(rec.status, metrics, "copied")
                copies.append((p, "ok", {**metrics, "cached_from": rec.id}, rec.reason, 0.0))
                continue
            todo.append(p)
        if copies:
            self._commit(copies)
        return todo

    def request(self, point: Point) -> EvalRequest:
        """The pool's request that trains ``point``: its key, its genome, this run's precision."""
        from dogma_evolve.phenotype.plugins import pinned_loaded  # torch, as the training

        genome_id, task, steps, seed = point.key()
        return EvalRequest(
            genome_yaml=self.genome_of(point).to_yaml(),
            genome_id=genome_id,
            task=task,
            fidelity=steps,
            seed=seed,
            timeout_s=self.timeout_s,
            precision=self.precision,
            plugins=pinned_loaded(),  # the block kinds this command imported, for the workers
        )

    def record(self, point: Point, result: EvalResult, copied_from: int | None = None) -> None:
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
                EvaluationIn(*p.key(), status, metrics, reason, seconds, individual=by_slot(slot))
                for slot, (p, status, metrics, reason, seconds) in enumerate(rows)
            ],
            members=[by_slot(slot) for slot in range(len(rows))],
            driver=self.liveness.driver,
        )
        self.next_generation += 1
        for p, *_ in rows:
            rec = self.store.find_evaluation(*p.key(), run_id=self.run_id)
            p.evaluation_id = rec.id if rec is not None else None

    def finish(self, failed: bool | None) -> None:
        """Mark the run finished (or failed) and release it; ``None``: release it only (it
        stays resumable, shown ``interrupted``)."""
        try:
            if failed is not None:
                self.store.set_run_status(self.run_id, "failed" if failed else "finished")
        finally:
            self.liveness.__exit__(None, None, None)


def lookup_all(recorders: Sequence[R]) -> list[tuple[R, Any]]:
    """Each recorder's points still to train (``lookup``), with their recorder."""
    return [(rec, p) for rec in recorders for p in rec.lookup()]


def train(todo: Sequence[tuple[TrainingRecorder, Point]], pool: Any, on_point: OnPoint | None = None) -> None:
    """Train ``todo`` on ``pool`` in the order given, committing each result as it arrives
    (``record``), or raising `EnvironmentFailure` at the first environment failure, which
    records nothing (the pool has retried it); a key several points share is trained once:
    the first point's run gets the row, the others a copy marked ``cached_from``.
    ``on_point(recorder, point, done, total)`` after each training (``total``: the
    trainings requested)."""
    by_key: dict[EvalKey, list[tuple[TrainingRecorder, Point]]] = {}
    requests = []
    for rec, p in todo:
        key = p.key()
        if key not in by_key:
            requests.append(rec.request(p))
        by_key.setdefault(key, []).append((rec, p))
    done = 0

    def on_result(result: EvalResult) -> None:
        nonlocal done
        if is_environment(result):  # the machine's failure, not the genome's: stop, record nothing
            raise EnvironmentFailure(result)
        (rec, p), *others = by_key[natural_key(result)]
        rec.record(p, result)
        for other, q in others:
            other.record(q, result, copied_from=p.evaluation_id)
        done += 1
        if on_point is not None:
            on_point(rec, p, done, len(requests))

    if requests:
        pool.evaluate(requests, on_result=on_result)


def train_recorded(
    recorders: Sequence[TrainingRecorder],
    todo: Sequence[tuple[TrainingRecorder, Point]],
    open_pool: Callable[[], AbstractContextManager[Any]],
    on_point: OnPoint | None = None,
) -> None:
    """The one training driver of `evolve scale`, `ablate`, `calibrate` and `run --ladder`:
    train ``todo`` (``lookup_all``'s) on the pool ``open_pool()`` opens, only when there is
    something to train (:func:`train`), then mark every recorder's run finished, or failed
    when training raised. An environment failure (`EnvironmentFailure`, raised on) leaves
    the runs released but not failed: the same command, run again once the cause is fixed,
    resumes them with what was trained."""
    failed: bool | None = True
    try:
        if todo:
            with open_pool() as pool:
                train(todo, pool, on_point)
        failed = False
    except EnvironmentFailure:
        failed = None
        raise
    finally:
        for rec in recorders:
            rec.finish(failed)


__all__ = ["OnPoint", "Point", "TrainingRecorder", "lookup_all", "newest_run", "train", "train_recorded"]
