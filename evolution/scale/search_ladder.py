"""`evolve run --ladder`: take the run's Pareto elite up a size ladder and rank it there.

A search judges candidates at one tiny size; what a user wants is the design that is best
larger. After the run's last generation the ladder takes the elite (``elite_of``: the Pareto
front, best quality first, then the next best by quality, at most ``ladder_elites``, 8 by
default so that the search → ladder correlation has an interval; when any clears the quality
floor, only those) and, for each elite individual:

* resizes its genome along ``ladder_axis`` (``evolution.scale.ladder``, width and depth
  together by default) into ``ladder_sizes`` or, by default, a **compact ladder**: its
  smallest valid model ``N₀``, the first model with ``N ≥ 10^1.5·N₀`` (the least span a fit
  accepts) and the two models nearest the log-even sizes between them;
* trains every size ``ladder_seeds`` times on ``ladder_task`` (``bytelm_en``, real English
  text) for ``ladder_tokens_per_param`` (5) tokens per non-embedding parameter, or with
  ``ladder_tokens`` one fixed count for every size (a fixed-data ladder: labelled, not a
  scaling law, `evolution.scale.regime`), through the run's own Ray pool; a size over the
  epoch cap (4 passes over the text) leaves its elite unranked with the reason; the points
  are the elite's **scale run** (``evolution.scale.train``: ``kind: "scale"``, natural keys),
  so a killed ladder resumes without retraining and ``evolve scale`` of the same genome and
  sizes finds the same points;
* fits ``L(N) = E + A·N^(−α)`` (``evaluation.scaling``) and extrapolates to
  ``target_params``: ``L̂ = E + A·target^(−α)``, with the fit's bootstrap replicates giving
  the interval (percentiles, widened by the same Student factor as the fit's own).

The elite is ranked by ``L̂`` (rank 1: lowest); a ladder that cannot determine a fit (a
failed point, losses that do not fall with size) keeps its row, unranked, with the reason.
Rows go to ``ladder_ranks`` (store revision 0005) with the generation they followed.

**Transfer audit.** The search decided which designs went up the ladder, so two rank
correlations are stored with the rows (``transfer`` rows with named fidelities) and shown by
``evolve report``: the elite's search quality against its extrapolated loss (negated, so a
positive ρ means the search's order held; ``"search"`` → ``"ladder@N"``), and its loss at the
ladder's first rung against its last (``"rung 1"`` → ``"rung 4"``: whether the smallest size
already predicts the largest).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from dogma_evolve.evaluation.scaling import LadderError, PowerLawFit
from dogma_evolve.evaluation.scaling.fit import interval as student_interval
from dogma_evolve.evaluation.tasks import get_task
from dogma_evolve.evaluation.transfer import rank_transfer
from dogma_evolve.evolution.objectives import quality_of
from dogma_evolve.evolution.scale.defaults import LADDER_TOKENS_PER_PARAM
from dogma_evolve.evolution.scale.ladder import MIN_DECADES, Design
from dogma_evolve.evolution.scale.train import Budget, Plan, Recorder, fit_points, make_plan, train_recorded
from dogma_evolve.evolution.strategies import below_floor
from dogma_evolve.evolution.training_run import lookup_all
from dogma_evolve.genome import Genome
from dogma_evolve.store import LadderRankIn, Store, TransferIn

LADDER_BOOT = 1000
LADDER_TEXT_HINT = "create_search(ladder_task='bytelm:PATH')"  # how a run's ladder gets a larger text


@dataclass(frozen=True)
class LadderSettings:
    """What the ladder of a run trains (the ``RunConfig`` fields named ``ladder_*``)."""

    elites: int
    sizes: tuple[float, ...] | None
    tokens: int | None  # a fixed-data ladder; None: tokens_per_param
    seeds: int
    task: str
    axis: str
    target_params: float
    timeout_s: float
    tokens_per_param: float = LADDER_TOKENS_PER_PARAM

    @property
    def budget(self) -> Budget:
        if self.tokens is not None:
            return Budget(tokens=self.tokens)
        return Budget(per_param=self.tokens_per_param)

    @property
    def setting(self) -> str:
        """The `evolve run` option a refusal of this ladder names."""
        if self.tokens is not None:
            return "--ladder-tokens"
        return "--ladder-sizes" if self.sizes else "--ladder-tokens-per-param"

    @classmethod
    def of(cls, config: Any) -> LadderSettings:
        sizes = tuple(float(s) for s in config.ladder_sizes) if config.ladder_sizes else None
        return cls(
            config.ladder_elites,
            sizes,
            None if config.ladder_tokens is None else round(config.ladder_tokens),
            config.ladder_seeds,
            config.ladder_task,
            config.ladder_axis,
            float(config.target_params),
            config.ladder_timeout_s,
            float(config.ladder_tokens_per_param),
        )


def compact_sizes(design: Design, axis: str) -> list[float]:
    """The compact ladder of ``design`` (module docstring) as parameter targets."""
    from dogma_evolve.phenotype import account

    found: list[int] = []
    for shape in design.shapes(axis):
        g = design.genome(shape)
        if g is None:
            continue
        p = account(g).non_embedding_params
        if not found or p > found[-1]:
            found.append(p)
        if p >= found[0] * 10**MIN_DECADES:
            break
    if not found or found[-1] < found[0] * 10**MIN_DECADES:
        raise LadderError(f"{design.source}: the {axis} axis does not span {MIN_DECADES:g} decades")
    low, high = found[0], found[-1]
    middle = []
    for k in (1, 2):
        target = low * (high / low) ** (k / 3)
        middle.append(min(found[1:-1] or found, key=lambda p: abs(math.log(p / target))))
    sizes = sorted({low, *middle, high})
    if len(sizes) < 4:
        raise LadderError(
            f"{design.source}: the {axis} axis gives fewer than 4 sizes below {high:,} parameters"
        )
    return [float(s) for s in sizes]


def elite_of(population: Sequence[Any], floor: float | None, limit: int) -> list[Any]:
    """At most ``limit`` candidates: the Pareto front, best quality first, then the next best
    by quality (an interval on the search → ladder correlation needs at least 6, better 8 or
    more); each genome once, only evaluated ones, and only those at or above the quality floor
    when any is."""
    from dogma_evolve.evolution.selection import pareto_front

    front = pareto_front(population)
    seen = {c.genome.id for c in front}
    rest: list[Any] = []
    for c in sorted(population, key=lambda c: -quality_of(c.metrics)):
        if (
            getattr(c, "status", "ok") == "ok"
            and not getattr(c, "violation", None)
            and c.genome.id not in seen
        ):
            seen.add(c.genome.id)
            rest.append(c)
    ranked = front + rest
    cleared = [c for c in ranked if not below_floor(quality_of(c.metrics), floor)]
    return (cleared or ranked)[:limit]


@dataclass
class EliteLadder:
    """One elite individual's ladder: its plan (None when it could not be made) and fit."""

    individual_id: int
    quality: float
    plan: Plan | None
    note: str = ""
    fit: PowerLawFit | None = None
    loss: tuple[float, float, float] | None = None  # estimate, low, high at the target

    def row(self, target: float, rank: int | None, scale_run: str | None) -> LadderRankIn:
        fit: dict[str, Any] = {}
        if self.fit is not None:
            f = self.fit
            fit = {
                "E": f.E,
                "A": f.A,
                "alpha": f.alpha,
                "alpha_low": f.alpha_ci[0],
                "alpha_high": f.alpha_ci[1],
            }
            fit.update(params_low=f.params_range[0], params_high=f.params_range[1])
        if self.loss is not None:
            fit.update(zip(("loss", "loss_low", "loss_high"), self.loss, strict=True))
        return LadderRankIn(
            self.individual_id, target, scale_run, self.quality, rank=rank, note=self.note, **fit
        )


def extrapolate(fit: PowerLawFit, target: float) -> tuple[float, float, float]:
    """``L̂(target)`` and its interval from the fit's bootstrap replicates (module docstring)."""
    estimate = float(fit.loss(target))
    e, a, alpha = fit.samples[:, 0], fit.samples[:, 1], fit.samples[:, 2]
    replicates = e + a * np.power(float(target), -alpha)
    low, high = student_interval(replicates, estimate, fit.confidence, fit.n_points - 3)
    return estimate, low, high


def plan_elite(candidates: Sequence[Any], settings: LadderSettings) -> list[EliteLadder]:
    """A plan per elite individual; one that cannot be made is kept with its reason."""
    task = get_task(settings.task)
    pinned = {"vocab": task.vocab_size, "max_len": task.seq_len}
    out = []
    for c in candidates:
        elite = EliteLadder(c.id, quality_of(c.metrics), None)
        try:
            genome = c.genome if isinstance(c.genome, Genome) else Genome.from_yaml(c.genome)
            design = Design.of(genome, pinned, f"individual {c.id}")
            sizes = list(settings.sizes) if settings.sizes else compact_sizes(design, settings.axis)
            elite.plan = make_plan(
                design,
                settings.axis,
                settings.task,
                sizes,
                [settings.budget],
                settings.seeds,
                settings.timeout_s,
                setting=settings.setting,
                hint=LADDER_TEXT_HINT,
            )
        except LadderError as e:
            elite.note = str(e)
        out.append(elite)
    return out


def rank_elite(ladders: Sequence[EliteLadder], target: float) -> list[int | None]:
    """Fit each ladder and rank the fitted ones by ``L̂(target)`` (1: lowest)."""
    for elite in ladders:
        if elite.plan is None:
            continue
        try:
            elite.fit = fit_points(elite.plan, 0, LADDER_BOOT)
            elite.loss = extrapolate(elite.fit, target)
        except LadderError as e:
            elite.note = str(e)
    order = sorted((e.loss[0], i) for i, e in enumerate(ladders) if e.loss is not None)
    ranks: list[int | None] = [None] * len(ladders)
    for r, (_, i) in enumerate(order, start=1):
        ranks[i] = r
    return ranks


def ladder_transfer(ladders: Sequence[EliteLadder], target: float) -> list[TransferIn]:
    """The two rank correlations of the module docstring, over the fitted elite."""
    fitted = [e for e in ladders if e.loss is not None and e.plan is not None]
    out = []
    if fitted:
        t = rank_transfer([e.quality for e in fitted], [-(e.loss or (0.0,))[0] for e in fitted])
        out.append(TransferIn("search", f"ladder@{target:.4g}", **t.to_dict()))
        last = min(len(e.plan.rungs) for e in fitted if e.plan is not None)
        small = [_mean_loss(e.plan, 0) for e in fitted if e.plan is not None]
        large = [_mean_loss(e.plan, len(e.plan.rungs) - 1) for e in fitted if e.plan is not None]
        t = rank_transfer([-v for v in small], [-v for v in large])
        out.append(TransferIn("rung 1", f"rung {last}", **t.to_dict()))
    return out


def _mean_loss(plan: Plan, rung: int) -> float:
    losses = [p.loss for p in plan.points if p.rung == rung and p.loss is not None]
    return float(np.mean(losses))


def run_ladder(
    store: Store,
    run_id: str,
    generation: int,
    population: Sequence[Any],
    config: Any,
    pool: Any,
    on_point: Callable[[Recorder, Any, int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Take the elite of ``population`` up its ladders (module docstring), store the ranks
    and the transfer, and return the rows as dicts, best first."""
    settings = LadderSettings.of(config)
    ladders = plan_elite(elite_of(population, config.quality_floor, settings.elites), settings)
    recorders = {e.individual_id: Recorder(store, e.plan) for e in ladders if e.plan is not None}
    todo = lookup_all(list(recorders.values()))
    train_recorded(list(recorders.values()), todo, lambda: nullcontext(pool), on_point)
    ranks = rank_elite(ladders, settings.target_params)
    rows = [
        e.row(
            settings.target_params,
            r,
            recorders[e.individual_id].run_id if e.individual_id in recorders else None,
        )
        for e, r in zip(ladders, ranks, strict=True)
    ]
    store.put_ladder(run_id, generation, rows, ladder_transfer(ladders, settings.target_params))
    return [ladder_row_dict(r) for r in sorted(rows, key=lambda r: (r.rank is None, r.rank or 0))]


def ladder_row_dict(r: Any) -> dict[str, Any]:
    """A ladder row (``LadderRankIn`` or its record) as plain data for ``--json``."""
    return {f.name: getattr(r, f.name) for f in fields(LadderRankIn)}


__all__ = [
    "LadderSettings",
    "compact_sizes",
    "elite_of",
    "extrapolate",
    "ladder_row_dict",
    "ladder_transfer",
    "rank_elite",
    "run_ladder",
]
