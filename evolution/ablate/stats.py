"""The statistics of an ablation (`evolution.ablate.ablation`): each variant's quality per replicate,
the baseline's mean with a 95 % Student-t interval over seeds, each change's mean and its
paired difference from the baseline with the Student-t interval of that difference, and the
JSON-able summary `evolve ablate` prints.

Pairing: replicate k of every variant trains under the same seed (the same data order), so a
change's effect is the mean of d_k = q_change,k − q_baseline,k over the replicates where both
trained, with mean ± t_{0.975, n-1} · s_d/√n; a failed training is left out of both, counted
in ``failed``; fewer than two pairs give no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dogma_evolve.evolution.ablate.ablation import CONFIDENCE, Plan
from dogma_evolve.evolution.evaluating import quality_of


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The Student-t interval of the mean of ``values``: mean ± t_{(1+c)/2, n-1} · s/√n
    (s the sample standard deviation); None for fewer than two values."""
    from scipy.stats import t

    n = len(values)
    if n < 2:
        return None
    mean = statistics.fmean(values)
    half = float(t.ppf((1 + confidence) / 2, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return (mean - half, mean + half)


def replicate_qualities(plan: Plan, variant: int) -> list[float | None]:
    """Quality of each replicate of a variant: the engine's quality on the run's one task, the
    mean over its tasks; None where a task failed or has not trained."""
    out: list[float | None] = []
    for k in range(plan.seeds):
        rows = [p for p in plan.points if p.variant == variant and p.replicate == k]
        if any(p.status != "ok" for p in rows):
            out.append(None)
        else:
            out.append(statistics.fmean(quality_of(p.metrics) for p in rows))
    return out


def per_task_means(plan: Plan, variant: int) -> dict[str, float]:
    """A variant's mean quality per task over its successful replicates: a suite's members
    (``metrics["per_task"]``) and, with several tasks, each task's and its members as
    ``task/member`` (the names ``Evaluator.combine`` gives them)."""
    several = len(plan.config.tasks) > 1
    sums: dict[str, list[float]] = {}
    for k in range(plan.seeds):
        rows = [p for p in plan.points if p.variant == variant and p.replicate == k]
        if any(p.status != "ok" for p in rows):
            continue
        for p in rows:
            parts = {p.task: quality_of(p.metrics)} if several else {}
            for member, value in (p.metrics.get("per_task") or {}).items():
                parts[f"{p.task}/{member}" if several else member] = float(value)
            for name, value in parts.items():
                sums.setdefault(name, []).append(value)
    return {name: statistics.fmean(values) for name, values in sums.items()}


@dataclass(frozen=True)
class Effect:
    """A variant's mean quality and, for a change, its paired difference from the baseline."""

    mean: float | None
    ci: tuple[float, float] | None  # of the mean (baseline) or of delta (a change)
    n: int  # replicates the interval is over
    failed: int
    qualities: tuple[float | None, ...]
    delta: float | None = None


def effects(base: Sequence[float | None], change: Sequence[float | None] | None = None) -> Effect:
    """The baseline's effect (``change`` None) or a change's, paired by replicate (module
    docstring)."""
    if change is None:
        ok = [q for q in base if q is not None]
        mean = statistics.fmean(ok) if ok else None
        return Effect(mean, t_interval(ok), len(ok), len(base) - len(ok), tuple(base))
    own = [q for q in change if q is not None]
    diffs = [c - b for b, c in zip(base, change, strict=True) if b is not None and c is not None]
    return Effect(
        statistics.fmean(own) if own else None,
        t_interval(diffs),
        len(diffs),
        len(change) - len(own),
        tuple(change),
        statistics.fmean(diffs) if diffs else None,
    )


def summary(plan: Plan) -> dict[str, Any]:
    """The JSON-able result: ``individual``, ``baseline`` {mean, ci}, ``ablations``
    [{change, params, mean, delta, ci}], with the run, seeds, tasks, skipped changes and each
    variant's mean quality per task (``per_task``)."""
    base_q = replicate_qualities(plan, 0)
    base = effects(base_q)
    ablations = []
    for i, v in enumerate(plan.variants[1:], start=1):
        e = effects(base_q, replicate_qualities(plan, i))
        ablations.append(
            {
                "change": v.name,
                "what": v.what,
                "params": v.params,
                "steps": v.steps,
                "mean": e.mean,
                "delta": e.delta,
                "ci": None if e.ci is None else list(e.ci),
                "n": e.n,
                "failed": e.failed,
                "qualities": list(e.qualities),
                "per_task": per_task_means(plan, i),
                "genome_id": v.genome.id,
            }
        )
    b = plan.baseline
    return {
        "individual": plan.individual,
        "genome_id": b.genome.id,
        "sequence": b.genome.sequence_view(),
        "source_run": plan.source_run,
        "run_id": plan.run_id,
        "task": plan.config.task,
        "seeds": plan.seeds,
        "confidence": CONFIDENCE,
        "baseline": {
            "mean": base.mean,
            "ci": None if base.ci is None else list(base.ci),
            "n": base.n,
            "failed": base.failed,
            "qualities": list(base.qualities),
            "per_task": per_task_means(plan, 0),
            "params": b.params,
            "steps": b.steps,
        },
        "ablations": ablations,
        "skipped": [{"change": c.name, "reason": c.reason} for c in plan.skipped],
        "points": [
            {
                "change": plan.variants[p.variant].name,
                "replicate": p.replicate,
                "task": p.task,
                "seed": p.seed,
                "status": p.status,
                "quality": quality_of(p.metrics) if p.status == "ok" else None,
                "origin": p.origin,
                "evaluation_id": p.evaluation_id,
            }
            for p in plan.points
        ],
    }


__all__ = ["Effect", "effects", "per_task_means", "replicate_qualities", "summary", "t_interval"]
