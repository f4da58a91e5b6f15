"""Training-FLOP accounting of a stored search run: total, anytime curve, incumbent.

A run's compute is what `dogma_evolve.evolution.report.summary.compute_totals` sums (the project's one
rule): `metrics["train_flops"]` over the run's REAL evaluation rows, i.e. rows of its own
births that are not copies from another run (`cached_from`), and, with several tasks, not
the run's per-task-mean row. A failed row records no compute (it counts 0).

The anytime curve orders those rows as they were trained: by generation, within a
generation the first-fidelity stage before the full one (`Evaluator.evaluate` trains every
child at the first fidelity, then the promoted ones in full), then by row id. After each
row the cumulative FLOPs and the best FULL-fidelity quality so far form one point; a
budget B then scores a run by the best full-fidelity result among the rows whose
cumulative FLOPs are <= B (`incumbent`), so a run that overshot B in its last generation
gains nothing from the overshoot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import quality_of
from dogma_evolve.evolution.report.summary import compute_totals
from dogma_evolve.store import EvaluationRecord, IndividualRecord, Store


def run_flops(store: Store, run_id: str, config: RunConfig) -> int:
    """Summed training FLOPs of the run's real evaluations (`compute_totals`)."""
    per_generation = compute_totals(store.individuals(run_id), config.task, len(config.tasks) > 1)
    return int(sum(bucket["train_flops"] for bucket in per_generation.values()))


@dataclass(frozen=True)
class Row:
    """One real evaluation row in training order."""

    generation: int
    fidelity: int
    flops: int  # this row's training FLOPs (0 for a failure)
    cumulative: int  # the run's FLOPs up to and including this row
    quality: float | None  # quality when the row is ok and at full fidelity, else None
    genome_id: str
    yaml: str
    params: int
    seed: int


def real_rows(
    individuals: Iterable[IndividualRecord], config: RunConfig
) -> list[tuple[IndividualRecord, EvaluationRecord]]:
    """(birth, row) of every real evaluation (module docstring), in training order."""
    several = len(config.tasks) > 1
    out = []
    for rec in individuals:
        for e in rec.evaluations:
            if e.individual_id != rec.id or "cached_from" in (e.metrics or {}):
                continue
            if several and e.task == config.task:
                continue
            out.append((rec, e))
    out.sort(
        key=lambda re: (re[0].generation, re[1].fidelity if isinstance(re[1].fidelity, int) else 0, re[1].id)
    )
    return out


def rows(store: Store, run_id: str, config: RunConfig) -> list[Row]:
    """The run's real evaluation rows in training order, with cumulative FLOPs."""
    if config.budget != "steps":
        raise ValueError("the FLOP curves need budget='steps' (one full fidelity for every genome)")
    full = config.steps
    out, total = [], 0
    for rec, e in real_rows(store.individuals(run_id), config):
        metrics: dict[str, Any] = e.metrics or {}
        value = metrics.get("train_flops", 0)
        flops = int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
        total += flops
        final = (
            e.status == "ok" and e.fidelity == full and (not (len(config.tasks) > 1) or e.task == config.task)
        )
        out.append(
            Row(
                rec.generation,
                int(e.fidelity) if isinstance(e.fidelity, int) else 0,
                flops,
                total,
                quality_of(metrics) if final else None,
                rec.genome_id,
                rec.yaml,
                int(metrics.get("params", 0)),
                e.seed,
            )
        )
    return out


def curve(run_rows: list[Row]) -> list[tuple[float, float]]:
    """(cumulative FLOPs, best full-fidelity quality so far) after each full result."""
    out: list[tuple[float, float]] = []
    best = None
    for r in run_rows:
        if r.quality is not None and (best is None or r.quality > best):
            best = r.quality
            out.append((float(r.cumulative), best))
    return out


def incumbent(run_rows: list[Row], budget: float) -> Row | None:
    """The best full-fidelity row within `budget` cumulative FLOPs (ties: fewer
    parameters, then genome id); None when none is."""
    scored = [r for r in run_rows if r.quality is not None and r.cumulative <= budget]
    if not scored:
        return None
    return min(scored, key=lambda r: (-(r.quality or 0.0), r.params, r.genome_id))


def search_seeds(store: Store, run_id: str) -> set[int]:
    """Every training seed any evaluation row of the run used."""
    return {e.seed for rec in store.individuals(run_id) for e in rec.evaluations}


__all__ = ["Row", "curve", "incumbent", "real_rows", "rows", "run_flops", "search_seeds"]
