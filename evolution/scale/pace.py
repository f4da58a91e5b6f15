"""The default ladder's time budget: a short probe of each rung's training pace on this
machine, the ladder's projected wall time on the pool, and the default tokens per parameter
lowered until the projection fits.

`evolve scale` without ``--tokens-per-param`` or ``--tokens`` trains 20 tokens per
non-embedding parameter (compute-optimal). Designs differ in pace far more than in FLOPs: on
the 2-core development machine the `dogma` preset's 488k rung trains 2.7k tokens/s (its
step loops), Llama's 279k rung 15k, so its default ladder took 73 min where Llama's takes 5.
With ``--minutes M`` (default ``DEFAULT_MINUTES``) the default ratio is the first of
``RATIOS`` whose projection is within M minutes: the sizes stay those of the 20-token ladder
(so the span a fit needs is kept), only the tokens shrink, and the regime says
"proportional" (a scaling law along ``D = r·N``, not the compute-optimal frontier).

**The probe** trains each rung ``PROBE_STEPS`` (2, then 6) steps on the threads a worker gets
(``cores // workers``), in as many processes at once as the pool has workers (``SideBySide``:
the workers share the cores' caches and memory bandwidth): a point of ``s`` steps is projected
to take ``overhead + s · step`` seconds, with ``step`` the difference of the two trainings per
step (the first steps' warm-up cancels) and ``overhead`` the building and scoring around them,
the slowest copy's. The points are scheduled largest first on the workers (list scheduling, as
the pool dispatches them); the projection is the last one's finish.

**Resume.** The choice depends on this machine's pace, so it is printed and recorded (the
budget is part of the run's key). Before probing, a stored run of the same ladder under any
of ``RATIOS`` is taken as it is, so a killed default ladder resumes as itself, on any machine.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dogma_evolve.evolution.scale.defaults import DEFAULT_MINUTES, DEFAULT_TOKENS_PER_PARAM

RATIOS = (DEFAULT_TOKENS_PER_PARAM, 10.0, 5.0, 2.5)  # the default, then what the budget lowers it to
PROBE_STEPS = (2, 6)


@dataclass(frozen=True)
class Pace:
    """One rung's measured pace: ``seconds(steps) = overhead_s + steps · step_s``."""

    overhead_s: float  # building the model and scoring it
    step_s: float  # one training step

    def seconds(self, steps: int) -> float:
        return self.overhead_s + steps * self.step_s


def makespan(durations: Sequence[float], workers: int) -> float:
    """Seconds until the last of ``durations`` finishes when each starts, largest first, on
    the first of ``workers`` free (list scheduling)."""
    free = [0.0] * max(1, workers)
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def projected_seconds(plans: Sequence[Any], paces: dict[str, Pace], workers: int) -> float:
    """The wall time of training every point of ``plans`` (``evolution.scale.train.Plan``;
    a key two plans share is trained once) on ``workers``."""
    seen: dict[Any, float] = {}
    for plan in plans:
        for p in plan.points:
            seen[p.key()] = paces[p.genome_id].seconds(p.steps)
    return makespan(list(seen.values()), workers)


def probe(genome: Any, task: str, seed: int, threads: int, plugins: Sequence[str] = ()) -> Pace | None:
    """``genome``'s pace on ``task`` in this process (module docstring); None when a probe
    training fails (the budget then cannot be judged and the default ratio stays).
    ``plugins``: the pinned block kinds it may use (`phenotype.plugins`)."""
    import torch

    from dogma_evolve.evaluation import EvalRequest
    from dogma_evolve.evaluation.evaluate import evaluate

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runs = []
        for steps in PROBE_STEPS:
            start = time.perf_counter()
            r = evaluate(
                EvalRequest(
                    genome_yaml=genome.to_yaml(),
                    genome_id=genome.id,
                    task=task,
                    fidelity=steps,
                    seed=seed,
                    plugins=tuple(plugins),
                )
            )
            wall = time.perf_counter() - start
            if not r.ok:
                return None
            runs.append((steps, float(r.metrics.get("train_seconds", wall)), wall))
    finally:
        torch.set_num_threads(before)
    (s0, t0, w0), (s1, t1, _) = runs
    step = max((t1 - t0) / (s1 - s0), t1 / s1 / 2)  # a noisy difference is floored, never negative
    return Pace(overhead_s=max(0.0, w0 - t0), step_s=step)


def _probe_job(genome_yaml: str, task: str, threads: int, plugins: tuple[str, ...]) -> Pace | None:
    """`probe` in a probing process (module level: it is sent by reference)."""
    from dogma_evolve.genome import Genome

    if plugins:  # the genome's own kinds, before it is read
        from dogma_evolve.phenotype.plugins import import_pinned

        import_pinned(plugins)
    return probe(Genome.from_yaml(genome_yaml), task, 0, threads, plugins)


def _ready(_: int) -> None:
    import dogma_evolve.evaluation.evaluate  # noqa: F401  (torch and the tasks, before the timed probes)


class SideBySide:
    """Probes a rung with ``copies`` processes at once, as the pool's workers train side by
    side sharing the cores' caches and memory bandwidth (a probe alone would miss what that
    costs; here two Llama 279k trainings of 200 steps ran at 0.083 and 0.086 s a step together,
    0.087 alone). The slowest copy's pace is the rung's. One copy probes in this process."""

    def __init__(self, copies: int, threads: int, plugins: Sequence[str] = ()) -> None:
        self.copies, self.threads, self.plugins = max(1, copies), threads, tuple(plugins)
        self.pool: Any = None

    def __call__(self, genome: Any, task: str) -> Pace | None:
        if self.copies == 1:
            return probe(genome, task, 0, self.threads, self.plugins)
        if self.pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(self.copies, mp_context=multiprocessing.get_context("spawn"))
            list(self.pool.map(_ready, range(self.copies)))
        jobs = [
            self.pool.submit(_probe_job, genome.to_yaml(), task, self.threads, self.plugins)
            for _ in range(self.copies)
        ]
        paces = [j.result() for j in jobs]
        if any(p is None for p in paces):
            return None
        return Pace(max(p.overhead_s for p in paces if p), max(p.step_s for p in paces if p))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


@dataclass(frozen=True)
class Choice:
    """The default ratio the budget chose, and why."""

    ratio: float
    projected_s: float | None  # None: resumed from the store, or not probed
    minutes: float
    projections: dict[float, float]  # ratio -> projected seconds, the ones tried
    resumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens_per_param": self.ratio,
            "projected_s": None if self.projected_s is None else round(self.projected_s, 1),
            "minutes": self.minutes,
            "projections": [  # in the order tried (a JSON object's keys may be sorted)
                {"tokens_per_param": r, "projected_s": round(s, 1)} for r, s in self.projections.items()
            ],
            "resumed": self.resumed,
        }

    def message(self) -> str:
        if self.resumed:
            return f"{self.ratio:g} tokens per parameter: the stored run of this default ladder, resumed"
        tried = ", ".join(f"{s / 60:.0f} min at {r:g}" for r, s in self.projections.items())
        if self.projected_s is None:
            return f"{self.ratio:g} tokens per parameter (no probe: the pace could not be measured)"
        fits = self.projected_s <= 60 * self.minutes
        head = f"{self.ratio:g} tokens per parameter" + (
            "" if self.ratio == RATIOS[0] else f" (not {RATIOS[0]:g})"
        )
        tail = "" if fits else f"; over --minutes {self.minutes:g} even at the lowest ratio"
        return f"{head}: projected here {tried} on the pool (--minutes {self.minutes:g}){tail}"


def choose(
    plans_at: Callable[[float], list[Any]],
    stored: Callable[[list[Any]], bool],
    minutes: float,
    workers: int | None,
    pace_of: Callable[[Any, str], Pace | None] | None = None,
) -> tuple[list[Any], Choice]:
    """The plans of the default ladder under the first ratio of ``RATIOS`` that is stored
    (``stored(plans)``: a run of theirs exists) or whose projection fits ``minutes``; the
    last ratio when none fits. ``plans_at(r)`` builds the plans at ``r`` tokens per parameter;
    ``pace_of(rung genome, task)`` measures a rung (default ``SideBySide``: as many copies at
    once as the pool has workers, each on a worker's threads)."""
    candidates = {r: plans_at(r) for r in RATIOS}
    for r, plans in candidates.items():
        if stored(plans):
            return plans, Choice(r, None, minutes, {}, resumed=True)
    n = workers or os.cpu_count() or 1
    first = candidates[RATIOS[0]]
    side_by_side = None
    if pace_of is None:
        from dogma_evolve.phenotype.plugins import pinned_loaded

        pace_of = side_by_side = SideBySide(n, max(1, (os.cpu_count() or 1) // n), pinned_loaded())
    paces: dict[str, Pace] = {}
    try:
        for plan in first:
            for rung in plan.rungs:
                if rung.genome.id not in paces:
                    pace = pace_of(rung.genome, plan.task)
                    if pace is None:
                        return first, Choice(RATIOS[0], None, minutes, {})
                    paces[rung.genome.id] = pace
    finally:
        if side_by_side is not None:
            side_by_side.close()
    projections: dict[float, float] = {}
    for r, plans in candidates.items():
        projections[r] = projected_seconds(plans, paces, n)
        if projections[r] <= 60 * minutes:
            return plans, Choice(r, projections[r], minutes, projections)
    last = RATIOS[-1]
    return candidates[last], Choice(last, projections[last], minutes, projections)


__all__ = [
    "DEFAULT_MINUTES",
    "PROBE_STEPS",
    "RATIOS",
    "Choice",
    "Pace",
    "SideBySide",
    "choose",
    "makespan",
    "probe",
]
