"""`Search`: one stored search, driven and read from Python (Optuna's `Study` is the model).

    search.optimize(generations=2, callbacks=[fn])   run on; fn(search, report) after each
                                                     committed generation
    search.best_individual / search.pareto_front     `Individual` records, the engine's rules
    search.individuals() / search.evaluations()      every birth; one plain dict per evaluation
    search.evaluations_dataframe()                   the same as a pandas DataFrame
    search.export(path, individual=None, format="standalone"|"hf")

A `Search` holds a store and its run, opened once (`stored_run.StoredRun`: config, space,
the evaluator the engine `optimize` binds builds and shares); everything it reports is read from the
store, so it is the same in another process, after a resume, or while the run is being driven
elsewhere. `create_search` and `load_search` (`evolution.study.opening`) make one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.study.results import Individual, dataframe, evaluation_rows
from dogma_evolve.evolution.study.running import Callback, drive, events, stopping
from dogma_evolve.evolution.types import Event

if TYPE_CHECKING:
    from dogma_evolve.evolution.config import RunConfig
    from dogma_evolve.evolution.engine import Engine
    from dogma_evolve.evolution.study.stored_run import StoredRun
    from dogma_evolve.store import RunRecord, Store


class Search:
    """A search stored in ``store`` as run ``run_id`` (module docstring).

    ``overrides`` are the `RunConfig` fields a resumed search takes anew
    (`running.RESUME_OVERRIDES`: workers, ray_address, timeout_s, the ladder's options).
    ``on_event(kind, data)`` sees the engine's progress ("generation", "result",
    "committed"; `evolve run`'s display uses it), ``on_ladder_point`` each size-ladder
    training, ``on_finalist`` each finalist's long training (``--select-by long``). After
    `optimize`, ``engine`` and ``population`` are that call's. ``stored``: the run already
    open (`create_search`'s); else it is opened on first use."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        overrides: dict[str, Any] | None = None,
        owns_store: bool = False,
        stored: StoredRun | None = None,
    ):
        self.store, self.run_id = store, run_id
        self._stored = stored
        self.overrides = dict(overrides or {})
        self.owns_store = owns_store
        self.on_event: Event | None = None
        self.on_ladder_point: Any = None
        self.on_finalist: Any = None
        self.engine: Engine | None = None
        self.population: list[Any] = []
        self.stop_requested = False

    def __repr__(self) -> str:
        return f"Search(run_id={self.run_id!r})"

    # -- the run ---------------------------------------------------------------------------
    @property
    def run(self) -> RunRecord:
        """The stored run: status, generations, evaluations, stop reason."""
        record = self.store.get_run(self.run_id)
        if record is None:
            raise UsageError(f"no run {self.run_id} in this store")
        return record

    @property
    def stored(self) -> StoredRun:
        """The run, opened once (`StoredRun.open`, with this search's overrides): a `KeyError`
        when the store has no such run."""
        if self._stored is None:
            from dogma_evolve.evolution.study.stored_run import StoredRun

            self._stored = StoredRun.open(self.store, self.run_id, **self.overrides)
        return self._stored

    @property
    def config(self) -> RunConfig:
        """The settings the search runs with (`RunConfig`: as made, with the overrides it
        was loaded with)."""
        return self.stored.config

    def optimize(
        self,
        generations: int | None = None,
        evaluations: int | None = None,
        callbacks: Sequence[Callback] = (),
    ) -> None:
        """Run the search on: ``generations`` more generations (the first call also makes
        generation 0, the seeds) and/or ``evaluations`` more real evaluations (cache hits
        are free); neither: to the settings it was made with (`RunConfig.generations`,
        `max_evaluations`). Each callback is called as ``callback(search, report)``
        (`GenerationReport`) after every committed generation; see `evolution.study.running`
        for what an exception in one, `stop()` and Ctrl-C leave behind. Refused: a user task
        whose code changed since it was pinned (UsageError), a run another live driver
        holds (`store.liveness.RunHeld`), a training past a text's epoch cap (UsageError,
        `evolution.preflight.check_text`: a resume's ladder options are checked here)."""
        from dogma_evolve.evolution.engine import Engine  # torch
        from dogma_evolve.evolution.preflight import check_text
        from dogma_evolve.evolution.rules import evaluations_spent

        stored = self.stored  # KeyError: no such run
        config = stored.config
        check_text(config, stored.space)  # a resume's --ladder-sizes too, before anything is written
        spent = evaluations_spent(self.store, self.run_id, config.task, len(config.tasks))
        stop = stopping(self.run.last_generation, spent, generations, evaluations)
        self.stop_requested = False
        on_event = events(self, self.on_event, list(callbacks))
        try:
            stored.run_on(**stop)  # how far this call runs, over the settings as loaded
            engine = Engine.bind(stored, None, on_event=on_event)
        except (KeyError, ValueError) as e:  # not a search; a user task's code changed
            raise UsageError(str(e).strip("'\"")) from None
        self.engine = engine
        self.population = drive(engine, self.store, self.on_ladder_point, self.on_finalist)

    def stop(self) -> None:
        """From a callback: end `optimize` after the generation just committed (finished,
        stop reason "stopped by Search.stop()"; a later `optimize` goes on)."""
        self.stop_requested = True

    # -- what it found ---------------------------------------------------------------------
    @property
    def best_individual(self) -> Individual:
        """The best individual evaluated in full (quality, then fewer parameters); a
        UsageError while none has been evaluated successfully."""
        best = self.stored.best()
        if best is None:
            raise UsageError(f"run {self.run_id} has no successfully evaluated individual yet")
        return best

    @property
    def pareto_front(self) -> list[Individual]:
        """The (quality ↑, parameters ↓) front of the individuals evaluated in full, best
        quality first (below the quality floor only while none clears it)."""
        return self.stored.front()

    def individuals(self) -> list[Individual]:
        """Every birth of the search, oldest first, with its result on the run's task."""
        return [i for _, i in self.stored.candidates()]

    def evaluations(self) -> list[dict[str, Any]]:
        """One plain dict per evaluation (`results.COLUMNS`): every task, fidelity and seed."""
        return evaluation_rows(self.store, self.run_id)

    def evaluations_dataframe(self) -> Any:
        """`evaluations()` as a pandas DataFrame, metrics as ``metrics.NAME`` columns (needs
        pandas; ImportError otherwise)."""
        return dataframe(self.evaluations())

    def export(
        self, path: str, individual: Individual | int | None = None, format: str = "standalone"
    ) -> dict[str, Any]:
        """Write ``individual`` (default: `best_individual`) as a standalone model directory
        (``format="hf"``: a transformers one) at ``path``, which must not hold anything;
        what was written (`evolution.export.export_individual`)."""
        from dogma_evolve.evolution.export import export_individual  # torch

        chosen = self.best_individual if individual is None else individual
        key = chosen if isinstance(chosen, int) else chosen.id
        record = self.store.individual(key)
        if record is None or record.run_id != self.run_id:
            raise UsageError(f"no individual {key} in run {self.run_id}")
        try:  # its block kinds and task (its example batch, a replay), as `evolve export` does
            self.stored.import_code(f"exporting individual {record.id}")
        except ValueError as e:  # PluginError, TaskCodeError: one line
            raise UsageError(str(e)) from None
        return export_individual(self.store, record, str(path), fmt=format)

    # -- the store -------------------------------------------------------------------------
    def close(self) -> None:
        """Close the store when this search opened it (from a URL)."""
        if self.owns_store:
            self.store.close()

    def __enter__(self) -> Search:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Search"]
