"""What a stored search found, as plain data: its individuals as records (`Individual`,
made by `stored_run.StoredRun`, which also answers the best and the front by the engine's own
rules) and one row per evaluation (`evaluation_rows`, `dataframe`). Nothing here imports a
user's task code.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dogma_evolve.evolution.evaluating import quality_of
from dogma_evolve.evolution.types import Candidate
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


def individual_of(rec: IndividualRecord, cand: Candidate, fidelity: Any, final: bool) -> Individual:
    """The plain record of birth ``rec`` read as the engine's candidate ``cand``."""
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


__all__ = ["COLUMNS", "Individual", "dataframe", "evaluation_rows", "individual_of"]
