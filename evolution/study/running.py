"""Driving a stored search for one `Search.optimize` call: the stopping rule it asks for,
the pool (the space's in-process one, else Ray's), the engine with its progress events and
the user's per-generation callbacks, the size ladder and the finalists' long trainings after it.

A callback runs after its generation is committed (one transaction): an exception it
raises stops the search there, the run left resumable (`interrupted`, no driver), and is
raised again to the caller; `Search.stop()` from a callback ends the search there as
finished (`stop_reason` says so). An evaluation that failed for its environment on every
attempt (`evaluation.environment.EnvironmentFailure`) stops it the same way, before its
generation is committed, and is raised again: fix the cause and resume. So does a full disk
under the store (`store.outage.StoreFull`: the transaction that met it was rolled back whole;
the little room left goes to releasing the run). Any other failure of the engine marks the
run `failed` where the store still takes that write (the first failure is the one raised).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import TYPE_CHECKING, Any

from dogma_evolve.evaluation.environment import EnvironmentFailure
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.types import Event, GenerationReport
from dogma_evolve.store import StoreError
from dogma_evolve.store.outage import StoreFull

if TYPE_CHECKING:
    from dogma_evolve.evaluation.protocol import Pool
    from dogma_evolve.evolution.engine import Engine
    from dogma_evolve.store import Store

Callback = Callable[[Any, GenerationReport], None]  # (search, the committed generation's report)
#: what a resumed search may take anew (the CLI's `--resume` options): how far and where it runs
RESUME_OVERRIDES: tuple[str, ...] = ("generations", "workers", "ray_address", "ladder", "target_params")
RESUME_OVERRIDES += ("ladder_sizes", "ladder_elites", "ladder_tokens", "ladder_tokens_per_param", "timeout_s")
RESUME_OVERRIDES += ("select_by",)
STOPPED = "stopped by Search.stop()"


class CallbackFailed(Exception):
    """A user's callback raised (``error``): the search stops after the committed generation."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class Stopped(Exception):
    """`Search.stop()` was called: the search ends after the committed generation, whose
    population this carries."""

    def __init__(self, population: list[Any]) -> None:
        super().__init__(STOPPED)
        self.population = population


def stopping(
    last_generation: int, spent: int, generations: int | None, evaluations: int | None
) -> dict[str, Any]:
    """The config overrides for ``generations`` more generations and/or ``evaluations`` more
    real evaluations (the one not given is then unbounded); {} when neither is given: the
    search's own settings. A search with nothing committed makes generation 0 (the seeds)
    first: ``generations=0`` makes only that."""
    if generations is None and evaluations is None:
        return {}
    for name, value, least in (("generations", generations, 0), ("evaluations", evaluations, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise UsageError(f"optimize: {name} must be an int of at least {least}, not {value!r}")
    return {
        # offspring generations in all: generation 0 (the seeds) comes with the first ones
        "generations": None if generations is None else max(last_generation, 0) + generations,
        "max_evaluations": None if evaluations is None else spent + evaluations,
    }


def pool_for(engine: Engine, store: Store) -> AbstractContextManager[Pool]:
    """The space's own in-process pool (a table look-up: no Ray), else Ray's pool."""
    local = engine.space.local_pool()
    if local is not None:
        return nullcontext(local)
    from dogma_evolve.evolution.pools import ray_pool

    config = engine.config
    return ray_pool(store, engine.run_id, config.workers, config.ray_address, config.timeout_s)


def events(search: Any, on_event: Event | None, callbacks: Sequence[Callback]) -> Event:
    """The engine's `on_event`: progress to ``on_event``, then after every committed
    generation each callback, then `Search.stop()`'s request."""

    def handle(kind: str, data: dict[str, Any]) -> None:
        if on_event is not None:
            on_event(kind, data)
        if kind != "committed":
            return
        for callback in callbacks:
            try:
                callback(search, data["report"])
            except BaseException as error:  # noqa: BLE001 - the user's code: re-raised by optimize
                raise CallbackFailed(error) from error
        if search.stop_requested:
            raise Stopped(data["population"])

    return handle


def drive(engine: Engine, store: Store, on_point: Any = None, on_finalist: Any = None) -> list[Any]:
    """Run ``engine`` on its pool (held by this driver meanwhile), then its ladder and its
    finalists' long trainings (`study.finalists`) when the config asks for them; the final
    population. The run's status follows the module docstring. ``on_point``, ``on_finalist``:
    progress callbacks of the ladder's and the finalists' trainings."""
    run_id = engine.run_id
    try:
        with engine.liveness, pool_for(engine, store) as pool:
            engine.pool = pool
            try:
                population = engine.run()
            except (KeyboardInterrupt, CallbackFailed, Stopped, EnvironmentFailure, StoreFull):
                raise  # the run stays resumable
            except BaseException:
                with suppress(StoreError):  # the store may be what failed: the first error is told
                    store.set_run_status(run_id, "failed")
                raise
            if engine.config.ladder:  # the elite up a size ladder, on the same pool
                from dogma_evolve.evolution.scale.search_ladder import run_ladder  # torch

                record = store.get_run(run_id)
                assert record is not None
                run_ladder(store, run_id, record.last_generation, population, engine.config, pool, on_point)
            if engine.config.select_by == "long":  # the finalists trained longer, on the same pool
                from dogma_evolve.evolution.study.finalists import run_finalists
                from dogma_evolve.evolution.study.stored_run import StoredRun

                run_finalists(StoredRun.open(store, run_id), pool, on_finalist)  # if stored so
    except ConnectionError as e:  # e.g. a Ray address that nothing answers at
        raise UsageError(str(e)) from None
    except Stopped as stopped:
        engine.stop_reason = STOPPED
        store.set_run_status(run_id, "finished", STOPPED)
        return stopped.population
    except CallbackFailed as failed:
        raise failed.error from None
    return population


__all__ = [
    "RESUME_OVERRIDES",
    "STOPPED",
    "Callback",
    "CallbackFailed",
    "Stopped",
    "drive",
    "events",
    "pool_for",
    "stopping",
]
