"""What a stored search found, read from its store by the engine's own rules: its individuals
as plain records (`Individual`), the best one (`RunView.best`, the rule every reader shares),
the Pareto front (`selection.pareto_front`, over the individuals evaluated in full) and one
row per evaluation.

Nothing here imports a user's task code: the space is rebuilt from the run's record
(`RunConfig.task_code`), as the reading commands do.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.evaluating import Evaluator, quality_of, seeds_of, stored_result
from dogma_evolve.evolution.selection import best_of, pareto_front
from dogma_evolve.evolution.spaces.registry import SPACES
from dogma_evolve.evolution.types import Candidate, individual_class
from dogma_evolve.store import IndividualRecord, Store

#: the columns of `evaluation_rows`, in order (`metrics` holds the whole metrics dict)
COLUMNS = (
    "individual",
    "generation",
    "genome_id",
    "task",
    "fidelity",
    "seed",
    "status",
    "quality",
    "params",
    "cached",
    "reason",
    "wall_seconds",
    "metrics",
)


@dataclass(frozen=True)
class Individual:
    """One birth of a search and its result on the run's task (the highest fidelity it was
    evaluated at; with `repeats`, quality is the mean over seeds). ``final``: evaluated at
    the run's full fidelity (a multi-fidelity child that was not promoted is not).
    ``yaml`` is the genome as stored (`genome.Genome.from_yaml` reads a DOGMA one)."""

    id: int
    run_id: str
    generation: int
    genome_id: str
    sequence: str
    yaml: str
    operator: str | None
    parents: tuple[int, ...]
    status: str | None  # None: not evaluated
    fidelity: int | str | None
    final: bool
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def quality(self) -> float:
        """The run's first objective (normalised accuracy on the suite; 0 when failed)."""
        return quality_of(self.metrics) if self.status == "ok" else 0.0

    @property
    def params(self) -> int | None:
        value = self.metrics.get("params")
        return None if value is None else int(value)


class RunView:
    """A stored search, read: its config, its individuals with the engine's fitness."""

    def __init__(self, store: Store, run_id: str) -> None:
        record = store.get_run(run_id)
        if record is None:
            raise KeyError(f"no run {run_id!r} in this store")
        self.store, self.run_id = store, run_id
        self.config = RunConfig.from_dict(record.config)
        self.space = SPACES[self.config.space].from_config(self.config)
        self.evaluator = Evaluator(self.config, self.space, store, run_id, lambda kind, data: None)

    def candidates(self) -> list[tuple[Candidate, Individual]]:
        """Every birth as the engine's candidate (fitness set) beside its plain record."""
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
            final = cand.status is not None and fidelity == self.evaluator.fidelity_for(cand, final=True)
            cand.record.final = final
            cand.fitness.values = self.evaluator.fitness(cand) if cand.status else self.failed()
            out.append((cand, _individual(rec, cand, fidelity, final)))
        return out

    def failed(self) -> tuple[float, ...]:
        from dogma_evolve.evolution.evaluating import FAILED_COST, FAILED_QUALITY

        return (FAILED_QUALITY,) + (FAILED_COST,) * (len(self.config.objectives) - 1)

    def best(self) -> Individual | None:
        """The run's best, by the one rule every reader uses (`run`'s summary, `report`,
        `export --best`, `Search.best_individual`, the HTML page): for a run that selects by
        its ladder, the latest ladder's rank 1 when one was ranked; otherwise, of the
        individuals evaluated in full (else evaluated at all), those confirmed under the
        run's `confirm` seeds when any is (`Evaluator.confirm`), the first in
        `selection.best_of`'s order; None when none was evaluated successfully."""
        pairs = self.candidates()
        chosen = ladder_choice_id(self.store, self.run_id, self.config)
        if chosen is not None:
            return next(i for _, i in pairs if i.id == chosen)
        ok = [(c, i) for c, i in pairs if c.status == "ok" and not c.violation]
        pool = [p for p in ok if p[1].final] or ok
        pool = [p for p in pool if seeds_of(p[0].metrics) >= self.config.confirm] or pool
        if not pool:
            return None
        by_cand = {id(c): i for c, i in pool}
        return by_cand[id(best_of([c for c, _ in pool]))]

    def front(self) -> list[Individual]:
        """The (quality ↑, params ↓) front of the individuals evaluated in full, best first."""
        pairs = self.candidates()
        by_cand = {id(c): i for c, i in pairs}
        final = [c for c, i in pairs if i.final]
        return [by_cand[id(c)] for c in pareto_front(final, floor=self.config.quality_floor)]


def ladder_choice_id(store: Store, run_id: str, config: RunConfig | dict[str, Any]) -> int | None:
    """The individual ranked 1 by the run's latest ladder when the run selects by its ladder
    (``select_by: ladder``); None otherwise, or when its ladder ranked none."""
    select_by = config.get("select_by") if isinstance(config, dict) else config.select_by
    if select_by != "ladder":
        return None
    rows = store.ladder(run_id)
    if not rows:
        return None
    last = max(r.generation for r in rows)
    return next((r.individual_id for r in rows if r.generation == last and r.rank == 1), None)


def _individual(rec: IndividualRecord, cand: Candidate, fidelity: Any, final: bool) -> Individual:
    return Individual(
        id=rec.id,
        run_id=rec.run_id,
        generation=rec.generation,
        genome_id=rec.genome_id,
        sequence=rec.sequence,
        yaml=rec.yaml,
        operator=rec.operator,
        parents=tuple(rec.parents),
        status=cand.status,
        fidelity=fidelity,
        final=final,
        metrics=dict(cand.metrics),
    )


def evaluation_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """One plain dict per evaluation row of the run (keys `COLUMNS`), in the order they
    were stored: every task, fidelity and seed; ``cached``: copied from another run's row."""
    rows: list[tuple[int, dict[str, Any]]] = []
    seen: set[int] = set()
    for rec in store.individuals(run_id):
        for e in rec.evaluations:
            if e.individual_id != rec.id or e.id in seen:
                continue
            seen.add(e.id)
            metrics = dict(e.metrics or {})
            rows.append(
                (
                    e.id,
                    {
                        "individual": rec.id,
                        "generation": rec.generation,
                        "genome_id": e.genome_id,
                        "task": e.task,
                        "fidelity": e.fidelity,
                        "seed": e.seed,
                        "status": e.status,
                        "quality": quality_of(metrics) if e.status == "ok" else None,
                        "params": metrics.get("params"),
                        "cached": "cached_from" in metrics,
                        "reason": e.reason,
                        "wall_seconds": e.wall_seconds,
                        "metrics": metrics,
                    },
                )
            )
    return [row for _, row in sorted(rows, key=lambda pair: pair[0])]


def dataframe(rows: Sequence[dict[str, Any]]) -> Any:
    """`evaluation_rows` as a pandas DataFrame: the columns of `COLUMNS` but ``metrics``, then
    one column ``metrics.NAME`` per number or text metric. Without pandas, an ImportError
    that points to the plain rows."""
    try:
        pandas = importlib.import_module("pandas")  # optional: not a dependency of the project
    except ImportError:
        raise ImportError(
            "evaluations_dataframe() needs pandas (pip install pandas); "
            "Search.evaluations() gives the same table as a list of dicts"
        ) from None
    flat = []
    for row in rows:
        out = {k: v for k, v in row.items() if k != "metrics"}
        for name, value in sorted(row["metrics"].items()):
            if isinstance(value, int | float | str | bool) or value is None:
                out[f"metrics.{name}"] = value
        flat.append(out)
    return pandas.DataFrame(flat, columns=None if flat else [c for c in COLUMNS if c != "metrics"])


__all__ = ["COLUMNS", "Individual", "RunView", "dataframe", "evaluation_rows"]
