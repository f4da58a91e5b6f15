"""`evolve scale`: train a size ladder of one design, record it as a run, fit how loss falls.

A ``Plan`` is the ladder (``evolution.scale.ladder``) times the token budgets times the seeds:
one ``LadderPoint`` per (rung, budget, replicate). A point is one evaluation with the natural
key (`store.keys.natural_key`: genome id, task, steps, seed) of every evaluation in the store:

* **params** (N) are non-embedding parameters (``Rung.params``; the total rides along as
  ``total_params``), the N of the fit and of ``tokens_per_param``;
* **epochs**: a point's tokens over the task's finite training text; a plan with a point
  over 4 is refused and every plan carries its ``Regime`` (`evolution.scale.regime`);
* **steps**: the budget's tokens (``tokens_per_param × params``, or a fixed count) over the
  task's tokens per step (``train_batch_size × seq_len``), rounded, at least 1; a point's
  ``tokens`` are the ones it actually trains on;
* **seed**: replicate 0 trains under the seed ``evolve run`` gives the genome on that task
  (``derive_seed("eval", genome id, task)``, the default seed policy) and replicate k under
  ``derive_seed(that, "repeat", k)``, the seeds of ``--repeats``, so a search's result is a
  scale point and the other way round;
* the learning rate is the width rule, ``evaluation.budget.learning_rate(d_model)``, which
  ``evaluation.evaluate`` applies to every DOGMA phenotype.

**The store.** A ladder is a run whose config says ``kind: "scale"``; its ``ladder`` entry
(base genome, axis, task, rung genomes, budgets, seeds, timeout) identifies it, so the same
command finds its run again and a killed ``evolve scale`` resumes. Each trained point is
committed as soon as its result arrives, as one generation of that run: a birth (operator
None, ``change`` the point's rung, budget and replicate) and its evaluation row. Before
training, every point is looked up under its key: in the ladder's run it is done (whatever its
status: the key is unique in a run); a successful row of another run is copied, marked
``cached_from`` as the engine does, and not trained again. No schema change: a scale run is an
ordinary run whose generations are its points.

**Training** goes through the driver of every training command
(``evolution.training_run.train_recorded``) on the same Ray ``EvaluationPool`` as ``evolve
run`` (leases logged per run), largest points first (the longest jobs start first on a pool
of several workers).

**Fits** (``evaluation.scaling``): ``L(N) = E + A·N^(−α)`` on the first budget's successful
points, with bootstrap intervals and residuals; with more than one budget also each budget's
fit and ``L(N, D)``. ``compare`` puts two ladders on one rule: with ``--tokens-per-param r``
compute is ``C ≈ 6·r·N²``; with a fixed ``--tokens D`` it is ``6·D·N``, and matched compute is
matched N as well (``beta`` then says how many times the parameters, at the same data, B
needs for A's loss).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from dogma_evolve.evaluation.budget import learning_rate
from dogma_evolve.evaluation.precision import pool_precision
from dogma_evolve.evaluation.scaling import LadderError, PowerLawFit, compare, fit_loss_surface, fit_power_law
from dogma_evolve.evaluation.tasks import derive_seed, get_task
from dogma_evolve.evolution import training_run
from dogma_evolve.evolution.pools import ray_pool
from dogma_evolve.evolution.scale.defaults import DEFAULT_TIMEOUT_S, MAX_SEEDS
from dogma_evolve.evolution.scale.ladder import MIN_DECADES, Design, Rung, ladder
from dogma_evolve.evolution.scale.regime import (
    MAX_EPOCHS,
    Regime,
    classify,
    default_top,
    epoch_cap,
    text_tokens_of,
)
from dogma_evolve.evolution.training_run import OnPoint, Point, TrainingRecorder
from dogma_evolve.genome import Genome
from dogma_evolve.store import Store


@dataclass(frozen=True)
class Budget:
    """The tokens a rung trains on: ``per_param`` × its parameters, or ``tokens`` for all."""

    per_param: float | None = None
    tokens: int | None = None

    def __post_init__(self) -> None:
        value = self.per_param if self.tokens is None else self.tokens
        if (self.per_param is None) == (self.tokens is None) or value is None:
            raise LadderError("a budget is tokens per parameter or a token count, one of them")
        if not (math.isfinite(value) and value > 0):
            raise LadderError(f"a token budget must be a positive number, not {value!r}")

    def target(self, params: int) -> float:
        return self.tokens if self.tokens is not None else float(self.per_param or 0) * params

    def to_dict(self) -> dict[str, Any]:
        return {"tokens_per_param": self.per_param} if self.tokens is None else {"tokens": self.tokens}

    def label(self) -> str:
        return f"{self.per_param:g} tokens/param" if self.tokens is None else f"{self.tokens:,} tokens"


def seed_of(genome_id: str, task: str, replicate: int) -> int:
    """The training seed of replicate ``replicate`` (module docstring): the engine's."""
    base = derive_seed("eval", genome_id, task)
    return base if replicate == 0 else derive_seed(base, "repeat", replicate)


@dataclass(kw_only=True)
class LadderPoint(Point):
    """One training (`training_run.Point`) of a ladder: a rung, budget and replicate."""

    rung: int  # index into the plan's rungs
    budget: int  # index into the plan's budgets
    replicate: int
    params: int  # non-embedding: the fit's N
    width: int
    depth: int
    tokens: int
    loss: float | None = None
    epochs: float | None = None  # passes over the task's training text, where it is finite
    total_params: int = 0

    def settle(self, status: str, metrics: dict[str, Any], origin: str) -> None:
        super().settle(status, metrics, origin)
        loss = metrics.get("loss")
        ok = status == "ok" and isinstance(loss, int | float) and math.isfinite(loss)
        self.loss = float(loss) if ok and loss is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "total_params": self.total_params,
            "tokens": self.tokens,
            "seed": self.seed,
            "loss": self.loss,
            "replicate": self.replicate,
            "steps": self.steps,
            "width": self.width,
            "depth": self.depth,
            "lr": self.metrics.get("lr", learning_rate(self.width)),
            "genome_id": self.genome_id,
            "status": self.status,
            "origin": self.origin,
            "evaluation_id": self.evaluation_id,
            "train_seconds": self.metrics.get("train_seconds"),
            "epochs": self.epochs,
        }


@dataclass
class Plan:
    """A ladder of ``design`` along ``axis`` on ``task``: its rungs × budgets × seeds."""

    design: Design
    axis: str
    task: str
    rungs: list[Rung]
    budgets: list[Budget]
    seeds: int
    timeout_s: float
    tokens_per_step: int
    points: list[LadderPoint]
    run_id: str | None = None
    warnings: list[str] = field(default_factory=list)
    regime: Regime | None = None  # of the first budget (`evolution.scale.regime`)
    # the user's block kinds its genomes hold (`phenotype.plugins`), records by pinned text:
    # part of the key (other code, another ladder) and stored so a later command re-imports them
    plugin_code: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return self.design.source

    def ladder_key(self) -> dict[str, Any]:
        """What identifies the ladder's run in the store (module docstring)."""
        return {
            "genome_id": self.design.genome_id,
            "axis": "depth" if self.axis == "copies" else self.axis,
            "task": self.task,
            "rungs": [r.genome.id for r in self.rungs],
            "budgets": [b.to_dict() for b in self.budgets],
            "seeds": self.seeds,
            "timeout_s": self.timeout_s,
        } | ({"plugins": sorted(self.plugin_code)} if self.plugin_code else {})

    def config(self) -> dict[str, Any]:
        config = {
            "source": self.source,
            "ladder": self.ladder_key(),
            "rungs": [r.to_dict() for r in self.rungs],
            "tokens_per_step": self.tokens_per_step,
        }
        if self.plugin_code:  # as `RunConfig.to_dict` stores them (`evolve replay` re-imports)
            config |= {"plugins": list(self.plugin_code), "plugin_code": self.plugin_code}
        return config

    def done(self) -> list[LadderPoint]:
        return [p for p in self.points if p.status is not None]


def steps_of(budget: Budget, params: int, per_step: int) -> int:
    """A point's steps (module docstring): the budget's tokens at ``params`` over the task's
    tokens per step, rounded, at least 1."""
    return max(1, round(budget.target(params) / per_step))


def default_setting(budgets: Sequence[Budget]) -> str:
    """The option of `evolve scale` a refusal of ``budgets`` names."""
    return "--tokens" if all(b.tokens is not None for b in budgets) else "--sizes"


def check_fed(task: str, sizes: Sequence[float], budgets: Sequence[Budget], setting: str, hint: str) -> None:
    """The epoch cap (`evolution.scale.regime`) of a ladder at the parameter targets ``sizes``
    before any design is resized: the points ``make_plan`` would make if every rung hit its
    target (`evolve run --ladder` checks its ``--ladder-sizes`` at startup this way; each
    elite's rungs, within a factor of 2 of the targets, are checked again by ``make_plan``)."""
    t = get_task(task)
    per_step = t.train_batch_size * t.seq_len
    data = text_tokens_of(t)
    if not data:
        return
    points = []
    for size in sizes:
        for budget in budgets:
            tokens = steps_of(budget, round(size), per_step) * per_step
            points.append((round(size), tokens, tokens / data))
    epoch_cap(points, data, [b.per_param for b in budgets], setting, hint=hint, per_step=per_step)


def make_plan(
    design: Design,
    axis: str,
    task: str,
    sizes: Sequence[float] | None,
    budgets: Sequence[Budget],
    seeds: int,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    strict: bool = True,
    min_decades: float | None = None,
    setting: str | None = None,
    hint: str = "--task bytelm:PATH",
) -> Plan:
    """The ladder's points (module docstring); ``LadderError`` (one line) when it cannot
    determine a fit: fewer than 2 seeds, a ladder ``scale_ladder.ladder`` refuses (``strict``:
    as there), or a point over the epoch cap (`evolution.scale.regime`). Without ``sizes`` the
    largest default size is what the task's text allows (``regime.default_top``).
    ``min_decades``: as `ladder` takes it (a comparison at matched sizes, no fit); ``setting``:
    the option the epoch cap's refusal names (default ``--sizes``, ``--tokens`` for fixed counts),
    ``hint`` how to give a larger text."""
    if seeds < 2:
        raise LadderError(f"{seeds} seed(s): an interval needs at least 2 seeds at every size (--seeds)")
    if seeds > MAX_SEEDS:
        raise LadderError(f"{seeds} seeds: at most {MAX_SEEDS}")
    if not budgets:
        raise LadderError("no token budget")
    t = get_task(task)
    per_step = t.train_batch_size * t.seq_len
    data = text_tokens_of(t)  # a finite training text (bytelm)
    ratios = [b.per_param for b in budgets if b.per_param is not None]
    ratio = max(ratios) if ratios else None
    try:
        rungs = ladder(
            design,
            axis,
            sizes,
            strict=strict,
            top=lambda smallest: default_top(smallest, data, ratio),
            min_decades=MIN_DECADES if min_decades is None else min_decades,
        )
    except LadderError as e:
        if sizes is None and data and ratio:
            raise LadderError(
                f"{e} (the default sizes stop where {ratio:g} tokens per parameter pass over the "
                f"{data:,}-token text {MAX_EPOCHS:g} times: use a larger text or fewer tokens per parameter)"
            ) from None
        raise
    points = []
    for i, rung in enumerate(rungs):
        for j, budget in enumerate(budgets):
            steps = steps_of(budget, rung.params, per_step)
            for k in range(seeds):
                points.append(
                    LadderPoint(
                        rung.genome.id,
                        task,
                        steps,
                        seed_of(rung.genome.id, task, k),
                        rung=i,
                        budget=j,
                        replicate=k,
                        params=rung.params,
                        width=rung.shape.width,
                        depth=rung.shape.depth,
                        tokens=steps * per_step,
                        epochs=None if not data else steps * per_step / data,
                        total_params=rung.total_params,
                    )
                )
    epoch_cap(
        [(p.params, p.tokens, p.epochs) for p in points],
        data,
        [b.per_param for b in budgets],
        setting or default_setting(budgets),
        hint=hint,
        per_step=per_step,
    )
    plan = Plan(design, axis, task, rungs, list(budgets), seeds, timeout_s, per_step, points)
    first = budgets[0]
    plan.regime = classify(first.per_param, first.tokens, [p.epochs for p in points if p.budget == 0], data)
    return plan


# -- the store -------------------------------------------------------------------------------
class Recorder(TrainingRecorder):
    """A ladder's run in the store (``evolution.training_run``): found or created, its stored
    points read, new ones committed."""

    def __init__(self, store: Store, plan: Plan) -> None:
        # where this process trains (auto: bf16 with CUDA): what its points train in and
        # the only precision whose rows other runs may lend it
        precision = pool_precision("auto", None)
        super().__init__(
            store, "scale", plan.config(), "ladder", plan.task, precision, plan.points, plan.timeout_s
        )
        self.plan = plan
        plan.run_id = self.run_id
        self.genomes = {r.genome.id: r.genome for r in plan.rungs}

    def genome_of(self, point: LadderPoint) -> Genome:
        return self.genomes[point.genome_id]

    def change_of(self, p: LadderPoint) -> dict[str, Any]:
        return {
            "op": "scale",
            "rung": p.rung,
            "width": p.width,
            "depth": p.depth,
            "params": p.params,
            "budget": self.plan.budgets[p.budget].to_dict(),
            "tokens": p.tokens,
            "replicate": p.replicate,
        }


def largest_first(todo: Sequence[tuple[Recorder, LadderPoint]]) -> list[tuple[Recorder, LadderPoint]]:
    """``todo`` in training order: largest points (parameters × tokens) first, so the longest
    jobs start first on a pool of several workers."""
    return sorted(todo, key=lambda rp: -(rp[1].params * rp[1].tokens))


def ladder_pool(
    store: Store,
    todo: Sequence[tuple[Recorder, LadderPoint]],
    workers: int | None,
    ray_address: str | None,
    timeout_s: float,
) -> Any:
    """The Ray pool of `evolve run` for ``todo``, each lease logged to its point's run."""
    owners = {p.key(): rec.run_id for rec, p in todo}
    return ray_pool(store, owners, workers, ray_address, timeout_s)


def train_recorded(
    recorders: Sequence[Recorder],
    todo: Sequence[tuple[Recorder, LadderPoint]],
    open_pool: Callable[[], AbstractContextManager[Any]],
    on_point: OnPoint | None = None,
) -> None:
    """``training_run.train_recorded`` (the one training driver) on ``todo``, largest
    points first; a key two ladders share is trained once, the other run gets a copy."""
    training_run.train_recorded(recorders, largest_first(todo), open_pool, on_point)


# -- fits ------------------------------------------------------------------------------------
def fit_points(plan: Plan, budget: int, n_boot: int) -> PowerLawFit:
    """``L(N)`` on the successful points of one budget; ``LadderError`` when they cannot
    determine it (a failed point can leave a size with one seed)."""
    pts = [p for p in plan.points if p.budget == budget and p.loss is not None]
    b = plan.budgets[budget]
    try:
        return fit_power_law(
            [p.params for p in pts],
            [p.loss for p in pts if p.loss is not None],
            seeds=[p.seed for p in pts],
            n_boot=n_boot,
            tokens_per_param=b.per_param,
        )
    except LadderError as e:
        failed = sum(
            p.status not in ("ok", None) or (p.status == "ok" and p.loss is None) for p in plan.points
        )
        note = f" ({failed} point(s) failed: see evolve runs {plan.run_id})" if failed else ""
        raise LadderError(f"{plan.source}: {e}{note}") from None


def fit_dict(fit: PowerLawFit) -> dict[str, Any]:
    return {
        "E": fit.E,
        "A": fit.A,
        "alpha": fit.alpha,
        "alpha_ci": list(fit.alpha_ci),
        "E_ci": list(fit.E_ci),
        "A_ci": list(fit.A_ci),
        "residual": fit.residual,
        "residuals": list(fit.residuals),
        "n_points": fit.n_points,
        "n_sizes": fit.n_sizes,
        "params_range": list(fit.params_range),
        "confidence": fit.confidence,
        "n_boot": fit.n_boot,
        "tokens_per_param": fit.tokens_per_param,
    }


def surface_dict(plan: Plan, n_boot: int) -> dict[str, Any] | None:
    """``L(N, D)`` when the plan has several budgets (tokens vary at fixed size); its refusal
    as ``{"refused": reason}`` when the points cannot determine it."""
    if len(plan.budgets) < 2:
        return None
    pts = [p for p in plan.points if p.loss is not None]
    try:
        s = fit_loss_surface(
            [p.params for p in pts], [p.tokens for p in pts], [p.loss or 0.0 for p in pts], n_boot=n_boot
        )
    except LadderError as e:
        return {"refused": str(e)}
    return {
        **{k: getattr(s, k) for k in ("E", "A", "alpha", "B", "beta", "residual", "n_points")},
        **{k: list(getattr(s, k)) for k in ("E_ci", "A_ci", "alpha_ci", "B_ci", "beta_ci", "residuals")},
    }


def plan_summary(plan: Plan, n_boot: int) -> tuple[dict[str, Any], PowerLawFit]:
    """The JSON-able result of a trained plan and its (first budget's) fit."""
    fit = fit_points(plan, 0, n_boot)
    residuals = iter(fit.residuals)
    points = []
    for p in plan.points:
        d = p.to_dict()
        d["residual"] = next(residuals) if p.budget == 0 and p.loss is not None else None
        points.append(d)
    out: dict[str, Any] = {
        "run_id": plan.run_id,
        "target": plan.source,
        "genome_id": plan.design.genome_id,
        "axis": plan.axis,
        "task": plan.task,
        "seeds": plan.seeds,
        "tokens_per_step": plan.tokens_per_step,
        "budgets": [b.to_dict() for b in plan.budgets],
        "rungs": [{**r.to_dict(), "lr": learning_rate(r.shape.width)} for r in plan.rungs],
        "points": points,
        "fit": fit_dict(fit),
        "regime": plan.regime.to_dict() if plan.regime is not None else None,
        "warnings": list(plan.warnings),
    }
    if len(plan.budgets) > 1:
        out["fits"] = [fit_dict(fit)] + [
            fit_dict(fit_points(plan, j, n_boot)) for j in range(1, len(plan.budgets))
        ]
        out["surface"] = surface_dict(plan, n_boot)
    return out, fit


def comparison_dict(a: PowerLawFit, b: PowerLawFit, plan: Plan, other: dict[str, Any]) -> dict[str, Any]:
    """B (``--against``) against A at matched compute on the first budget (module docstring)."""
    budget = plan.budgets[0]
    r = budget.per_param if budget.per_param is not None else 1.0  # fixed D: matched compute is matched N
    c = compare(a, b, tokens_per_param=r)
    lo, hi = c.params_range
    compute = (
        c.compute_range if budget.tokens is None else (6.0 * budget.tokens * lo, 6.0 * budget.tokens * hi)
    )
    return {
        "other_fit": other["fit"],
        "beta": c.sample_efficiency,
        "beta_range": None if c.sample_efficiency_range is None else list(c.sample_efficiency_range),
        "loss_gap": c.gap_mean,
        "loss_gap_range": list(c.gap_range),
        "loss_gap_mid": c.gap_mid,
        "loss_gap_mid_ci": list(c.gap_mid_ci),
        "crossover_params": c.crossover_params,
        "crossover_ci": list(c.crossover_ci),
        "crossovers": list(c.crossovers),
        "params_range": [lo, hi],
        "compute_range": list(compute),
        "basis": budget.to_dict(),
        "notes": list(c.notes),
    }
