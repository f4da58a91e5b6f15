"""`StoredRun`: one stored run, opened once. Every place that reopens a run goes through it:
the engine (a new run and a resume), the Python API (`Search`), `evolve run`'s summary,
`evolve report` (its text, JSON and HTML page), `evolve export --best` and `evolve ablate`.

    StoredRun.create(store, config)        a new run's row, no engine built (nobody drives it)
    StoredRun.open(store, run_id)          a stored run: its config parsed once, its space
    StoredRun.open(store, run_id, **over)  ... with how far and where it runs changed
    run.config, run.space                  the one of each the run has
    run.fidelity(genome, final)            a genome's training steps in this run (`rules.fidelity`)
    run.candidates(), run.best(), run.front()   its births by the engine's own rules
                                           (`evolution.rules`: fitness, fidelity)
    run.evaluator                          the run's `Evaluator`, built when first asked for (by
                                           the engine that binds to the run; its sink is a
                                           no-op until then): no reader needs one
    run.import_code(why)                   its pinned user tasks and block kinds, for a
                                           command that trains or builds its models

Reading imports no user code: the space is rebuilt from the run's record
(`RunConfig.task_code`), and a plugin's genes are its recorded stand-ins
(`genome.kinds.register_recorded`) until `import_code` imports the plugin itself. An engine
binds to one (`Engine.bind(run, pool)`) and then shares its config, space and evaluator.
Readers apply the engine's rules as the plain functions of `evolution.rules`, without an
evaluator.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dogma_evolve.evolution import rules
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.errors import not_a_search
from dogma_evolve.evolution.rules import FAILED_COST, FAILED_QUALITY, seeds_of, stored_result
from dogma_evolve.evolution.selection import best_key, best_of, pareto_front
from dogma_evolve.evolution.spaces.contract import Genotype, SearchSpace
from dogma_evolve.evolution.spaces.registry import SPACES
from dogma_evolve.evolution.study.results import Individual, individual_of
from dogma_evolve.evolution.study.running import RESUME_OVERRIDES
from dogma_evolve.evolution.types import Candidate, individual_class
from dogma_evolve.store import PolicyRecord, RunRecord, Store

if TYPE_CHECKING:
    from dogma_evolve.evolution.evaluating import Evaluator


def _quiet(kind: str, data: dict[str, Any]) -> None:
    """The evaluator's sink while no engine drives the run: progress goes nowhere."""


class StoredRun:
    """Run ``run_id`` of ``store`` with ``config`` (module docstring); ``stored``: the config
    as the store holds it (a dict). `open` and `create` make one."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        config: RunConfig,
        stored: dict[str, Any],
        kind: str,
        space: SearchSpace | None = None,
    ) -> None:
        self.store, self.run_id, self.kind = store, run_id, kind
        self.stored_config = stored
        self.config = self.opened_config = config
        self.space: SearchSpace = space if space is not None else SPACES[config.space].from_config(config)
        self._evaluator: Evaluator | None = None
        self._flops_task = rules.budget_task(config.budget, config.tasks[0], config.task_code)
        self._code_imported = False
        self._memory: tuple[list[PolicyRecord], list[Genotype]] | None = None

    def __repr__(self) -> str:
        return f"StoredRun(run_id={self.run_id!r}, kind={self.kind!r})"

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, store: Store, run_id: str, *, search: bool = False, **overrides: Any) -> StoredRun:
        """Stored run ``run_id`` (a `KeyError` when the store has none, or with ``search``
        when it is no search: `require_search`), its config read once (`RunConfig.from_dict`)
        with ``overrides`` (how far and where it runs, e.g. ``generations``) put over it; its
        plugins' recorded genes stand in for theirs."""
        record = store.get_run(run_id)
        if record is None:
            raise KeyError(f"no run {run_id!r} in this store")
        if search:
            _require_search(run_id, record.kind)
        register_recorded_kinds(record.config)
        config = RunConfig.from_dict({**record.config, **overrides})
        return cls(store, run_id, config, dict(record.config), record.kind)

    @classmethod
    def create(
        cls, store: Store, config: RunConfig, driver: str | None = None, space: SearchSpace | None = None
    ) -> StoredRun:
        """A new search's row for ``config``, held by ``driver`` when one is given (as
        `Store.create_run`; None: nobody drives it until an engine claims it); ``space``: the
        run's space when the caller built it already (`preflight.check_feasible`). Every refusal
        comes first, so a refused run leaves no row: a `KeyError` for a `memory_from` run the
        store lacks, a `ValueError` for one whose elites are not of this run's space."""
        run = cls(store, "", config, config.to_dict(), "search", space)
        if config.memory_from:
            run.memory()  # its refusals, before the row exists
        run.run_id = store.create_run(run.stored_config, config.seed, config.task, driver=driver)
        return run

    @property
    def evaluator(self) -> Evaluator:
        """The run's `Evaluator` (config, space, run id), built when first asked for: by the
        engine that binds to the run (`Engine.bind`), whose events it then sends; until then
        its sink is a no-op."""
        if self._evaluator is None:
            from dogma_evolve.evolution.evaluating import Evaluator

            self._evaluator = Evaluator(self.config, self.space, self.store, self.run_id, _quiet)
        return self._evaluator

    # -- what it is --------------------------------------------------------------------------
    @property
    def record(self) -> RunRecord:
        """The run's row as stored now: status, generations, evaluations."""
        record = self.store.get_run(self.run_id)
        if record is None:
            raise KeyError(f"no run {self.run_id!r} in this store")
        return record

    @property
    def tasks(self) -> tuple[str, ...]:
        """The run's tasks (pinned texts)."""
        return tuple(self.config.tasks)

    def require_search(self) -> None:
        """A `KeyError` naming what to run instead when the run is no search."""
        _require_search(self.run_id, self.kind)

    def run_on(self, **overrides: Any) -> RunConfig:
        """The config the next engine runs with: ``overrides`` (how far and where it runs:
        `RESUME_OVERRIDES` and ``max_evaluations``) put over the config as opened, checked by
        `RunConfig`; the space and the evaluator stay (neither depends on those)."""
        bad = sorted(set(overrides) - set(RESUME_OVERRIDES) - {"max_evaluations"})
        if bad:
            raise ValueError(f"{bad[0]!r} cannot change on a stored run")
        self.config = replace(self.opened_config, **overrides) if overrides else self.opened_config
        if self._evaluator is not None:
            self._evaluator.config = self.config
        return self.config

    def import_code(self, why: str) -> None:
        """Import the run's user tasks and block kinds, each with the code it was pinned to
        (once): a command that trains or builds the run's models calls this first. A
        `ValueError` (`TaskCodeError`, `PluginError`) naming ``why`` when the code cannot be
        imported or is not the pinned code."""
        if self._code_imported:
            return
        from dogma_evolve.evaluation.tasks.imported import import_recorded  # torch

        import_recorded(self.tasks, why)
        plugins = self.stored_config.get("plugins")
        if plugins:
            from dogma_evolve.phenotype.plugins import import_pinned

            import_pinned(plugins)
        self._code_imported = True

    def memory(self) -> tuple[list[PolicyRecord], list[Genotype]]:
        """What the run takes from its ``memory_from`` run (`RunConfig.memory_parts`): that
        run's operator credit and its elites that break no hard constraint here (empty for
        a part not taken). A `KeyError` when that run is not in the store, a `ValueError`
        when its elites are not genomes of this run's space. Read once: `create` reads it
        for its refusals, the engine that binds to the run takes it."""
        if self._memory is not None:
            return self._memory
        source = self.config.memory_from
        if not source or self.store.get_run(source) is None:
            raise KeyError(f"no run {source!r} to take memory from")
        credit = self.store.policy(source) if "credit" in self.config.memory_parts else []
        elites: list[Genotype] = []
        if "elites" in self.config.memory_parts:
            for a in self.store.archive(source):
                try:
                    genome = self.space.parse(a.yaml)
                except (ValueError, KeyError) as e:  # another space's elites do not fit here
                    raise ValueError(
                        f"run {source}'s elites are not {self.space.name} genomes: {e}"
                    ) from None
                if self.space.violation(genome) is None:
                    elites.append(genome)
        self._memory = credit, elites
        return self._memory

    def fidelity(self, genome: Genotype, final: bool = True) -> int:
        """Training steps of ``genome`` in this run at the full stage (``final``) or the first
        one: `rules.fidelity` under the run's budget (as `Evaluator.fidelity_for`)."""
        cfg = self.config
        return rules.fidelity(
            self.space,
            genome,
            final,
            steps=cfg.steps,
            first_fidelity=cfg.first_fidelity,
            max_params=cfg.max_params,
            flops_task=self._flops_task,
        )

    # -- what it found -----------------------------------------------------------------------
    def candidates(self) -> list[tuple[Candidate, Individual]]:
        """Every birth as the engine's candidate (fitness set, `rules.fitness`) beside its
        plain record, oldest first."""
        cfg = self.config
        cls = individual_class(len(self.config.objectives))
        out = []
        for rec in self.store.individuals(self.run_id):
            cand = cls(self.space.parse(rec.yaml))
            cand.id, cand.generation = rec.id, rec.generation
            rows = [e for e in rec.evaluations if e.task == self.config.task]
            cand.status, cand.metrics, fidelity = stored_result(rows)
            # as the engine stored it (`Evaluator.evaluate`: a violator is `invalid`, never
            # trained), so a reader needs no accounting, nor a plugin's code for it
            cand.violation = cand.metrics.get("violation") if cand.status == "invalid" else None
            cand.metrics.pop("cached_from", None)
            final = cand.status is not None and fidelity == self.fidelity(cand.genome, final=True)
            cand.record.final = final
            cand.fitness.values = (
                rules.fitness(cand.status, cand.metrics, cand.violation, cfg.objectives, cfg.quality_floor)
                if cand.status
                else self.failed()
            )
            out.append((cand, individual_of(rec, cand, fidelity, final)))
        return out

    def failed(self) -> tuple[float, ...]:
        """The fitness of a candidate that was never evaluated or failed."""
        return (FAILED_QUALITY,) + (FAILED_COST,) * (len(self.config.objectives) - 1)

    def best(self) -> Individual | None:
        """The run's best, by the one rule every reader uses (`run`'s summary, `report`,
        `export --best`, `Search.best_individual`, the HTML page): for a run stored to select
        by its ladder, the latest ladder's rank 1 when one was ranked; for one stored to select
        by its finalists trained longer, the best of them once all are (`study.finalists`);
        otherwise, of the individuals evaluated in full (else evaluated at all), those
        confirmed under the run's `confirm` seeds when any is (`Evaluator.confirm`,
        `rules.seeds_of`), the first in `selection.best_of`'s order; None when none was
        evaluated successfully."""
        pairs = self.candidates()
        chosen = ladder_choice_id(self.store, self.run_id, self.stored_config)
        if chosen is not None:
            return next(i for _, i in pairs if i.id == chosen)
        if self.stored_config.get("select_by") == "long":  # its finalists trained longer, once all are
            from dogma_evolve.evolution.study.finalists import long_choice_id

            chosen = long_choice_id(self)
            if chosen is not None:
                return next(i for _, i in pairs if i.id == chosen)
        ok = [(c, i) for c, i in pairs if c.status == "ok" and not c.violation]
        pool = [p for p in ok if p[1].final] or ok
        pool = [p for p in pool if seeds_of(p[0].metrics) >= self.config.confirm] or pool
        if not pool:
            return None
        by_cand = {id(c): i for c, i in pool}
        return by_cand[id(best_of([c for c, _ in pool]))]

    def finalists(self, k: int) -> list[tuple[Candidate, Individual]]:
        """The ``k`` best individuals evaluated in full, one a genome, in `best_of`'s order
        (`selection.best_key`; oldest first among equals): ``select_by: long``'s finalists
        (`evolution.study.finalists`)."""
        full = [(c, i) for c, i in self.candidates() if c.status == "ok" and not c.violation and i.final]
        out: list[tuple[Candidate, Individual]] = []
        for c, i in sorted(full, key=lambda pair: best_key(pair[0])):
            if len(out) < k and all(i.genome_id != j.genome_id for _, j in out):
                out.append((c, i))
        return out

    def front(self) -> list[Individual]:
        """The (quality ↑, params ↓) front of the individuals evaluated in full, best first
        (`selection.pareto_front`, the run's quality floor included)."""
        pairs = self.candidates()
        by_cand = {id(c): i for c, i in pairs}
        final = [c for c, i in pairs if i.final]
        return [by_cand[id(c)] for c in pareto_front(final, floor=self.config.quality_floor)]


def _require_search(run_id: str, kind: str) -> None:
    """A `KeyError` naming what to run instead when run ``run_id`` of ``kind`` is no search
    (its generations are a ladder's points, an ablation's or a calibration's trainings)."""
    if kind != "search":
        raise KeyError(f"run {run_id} is {not_a_search(kind)}")


def register_recorded_kinds(config: dict[str, Any]) -> None:
    """Let the plugin kinds a stored run recorded (``RunConfig.plugin_code``) stand in for
    their genes, so its genomes parse without the plugin's code (the plugin, once imported,
    replaces them)."""
    recorded = config.get("plugin_code") or {}
    if not recorded:
        return
    from dogma_evolve.genome.kinds import register_recorded

    for plugin in recorded.values():
        register_recorded(plugin["genes"])


def ladder_choice_id(store: Store, run_id: str, config: dict[str, Any]) -> int | None:
    """The individual ranked 1 by the run's latest ladder when the run, by its stored
    ``config``, selects by its ladder (``select_by: ladder``); None otherwise, or when its
    ladder ranked none."""
    if config.get("select_by") != "ladder":
        return None
    rows = store.ladder(run_id)
    if not rows:
        return None
    last = max(r.generation for r in rows)
    return next((r.individual_id for r in rows if r.generation == last and r.rank == 1), None)


__all__ = ["StoredRun", "ladder_choice_id", "register_recorded_kinds"]
