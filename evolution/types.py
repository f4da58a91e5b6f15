"""DEAP types, created once at import (pickling and Ray need module-level classes), and the
plain records the engine's modules share.

An individual is a genome in the population with its store id and evaluation; its
fitness is (quality ↑, cost ↓, ...): quality first, then one minimised cost per further
objective (`--objectives`). DEAP's convention holds: an invalid fitness
(`not ind.fitness.valid`, reset with `del ind.fitness.values`) means "not evaluated
yet". What the engine knows of an evaluation in progress (per-task results, cache hits,
fidelity, the rows to store) is the candidate's `record` (`EvalRecord`).

DEAP fixes a fitness's weights on its class, so one class per objective count is created
here (1 to MAX_OBJECTIVES); `individual_class(n)` picks it. `Individual` is the default
two-objective class (quality, parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from deap import base, creator

if TYPE_CHECKING:
    from dogma_evolve.evaluation.result import EvalResult
    from dogma_evolve.store import EvaluationIn

WEIGHTS = (1.0, -1.0)
MAX_OBJECTIVES = 5

#: Progress callback of the engine: `on_event(kind, data)`, kind "generation", "result"
#: or "committed".
Event = Callable[[str, dict[str, Any]], None]


class TaskResult(NamedTuple):
    """One task's evaluation of a candidate: its status and metrics."""

    status: str
    metrics: dict[str, Any]


@dataclass
class EvalRecord:
    """The engine's record of one candidate's evaluation in this process.

    `per_task`, `requested` and `fidelity` describe the latest evaluation stage (a child
    of a multi-fidelity run is evaluated at `min_steps`, then perhaps again at `steps`).
    """

    slot: int = 0  # its place among its generation's births (the store's `by_slot`)
    fidelity: int | str | None = None  # where its metrics come from; None: not evaluated
    per_task: dict[str, TaskResult] = field(default_factory=dict)  # at `fidelity`
    requested: bool = False  # at `fidelity`, something was evaluated (not only cache hits)
    final: bool = False  # evaluated at full fidelity, or invalid (never trained)
    spent_at: int = 0  # the run's evaluations when its result was known
    results: list[EvalResult] = field(default_factory=list)  # evaluations made for it here
    cached_rows: list[EvaluationIn] = field(default_factory=list)  # reused rows, copied
    confirmations: list[EvaluationIn] = field(default_factory=list)  # further seeds, once committed
    weights: bytes | None = None  # trained weights (safetensors) until committed

    def begin(self, fidelity: int) -> None:
        """Start an evaluation stage at `fidelity`."""
        self.fidelity, self.per_task, self.requested = fidelity, {}, False


class Candidate:
    """A genome in the population; `fitness` is attached by the DEAP creator."""

    fitness: Any  # deap.base.Fitness (DEAP ships no type information)
    rank: int  # NSGA-II front (0 = Pareto front), set by `selection.assign_rank_and_crowding`

    def __init__(self, genome: Any):
        self.genome = genome
        self.id: int | None = None  # store id, once committed
        self.generation: int = 0
        self.seed: int = 0
        self.status: str | None = None  # evaluation status (None before any evaluation)
        self.metrics: dict[str, Any] = {}
        self.op: str | None = None  # how it was born (None for seeds)
        self.change: dict[str, Any] | None = None
        self.parent_ids: list[int] = []
        self.parents: list[Candidate] = []  # parent individuals in memory (for credit)
        self.context: str | None = None  # region type the operator touched
        self.age: int = 0  # birth order, for aging evolution
        self.violation: str | None = None  # the hard constraint it breaks, if any
        self.predicted: float | None = None  # the surrogate's predicted quality (never stored)
        self.record = EvalRecord()

    @property
    def stored_id(self) -> int:
        """The store id of a committed individual (parents always are)."""
        if self.id is None:
            raise RuntimeError(f"{self!r} is not committed to the store yet")
        return self.id

    def __repr__(self) -> str:
        return f"Individual(id={self.id}, genome={self.genome.id[:12]}, status={self.status})"


@dataclass
class GenerationReport:
    """What one generation did (`Engine.reports`, the "committed" event)."""

    generation: int
    evaluated: int  # children trained here (at least one new evaluation), per fidelity stage
    cached: int  # children whose every result was reused, per fidelity stage
    failed: int  # children whose evaluation failed (`filtered` ones are not: never trained)
    discarded: list[str] = field(default_factory=list)
    best_quality: float = 0.0  # the population's best quality (the fitness's first value)
    requests: int = 0  # real evaluations (one per task and fidelity)
    hits: int = 0  # results reused instead of evaluated
    promoted: int = 0
    filtered: int = 0  # children the space's pre-filter stopped: stored `filtered`, never trained
    births: int = 0
    immigrants: int = 0  # random newcomers that filled places breeding left empty
    bred: int = 0  # children bred before the surrogate chose which to train
    explorers: int = 0  # children the surrogate chose from random genomes of the whole space
    surrogate_rho: float | None = None  # Spearman of its predictions on the trained children
    mean_quality: float = 0.0  # over the population
    families: int = 0  # distinct design families (`SearchSpace.family`) in the population


if not hasattr(creator, "FitnessQualityCost"):
    creator.create("FitnessQualityCost", base.Fitness, weights=WEIGHTS)
    creator.create("Individual", Candidate, fitness=creator.FitnessQualityCost)
for _n in range(1, MAX_OBJECTIVES + 1):
    if not hasattr(creator, f"Fitness{_n}"):
        creator.create(f"Fitness{_n}", base.Fitness, weights=(1.0,) + (-1.0,) * (_n - 1))
        creator.create(f"Individual{_n}", Candidate, fitness=getattr(creator, f"Fitness{_n}"))

Individual = creator.Individual


def individual_class(n_objectives: int) -> type[Candidate]:
    """The DEAP individual class whose fitness has `n_objectives` values (quality first)."""
    if n_objectives == 2:
        return cast(type[Candidate], creator.Individual)
    if not 1 <= n_objectives <= MAX_OBJECTIVES:
        raise ValueError(f"1 to {MAX_OBJECTIVES} objectives, not {n_objectives}")
    return cast(type[Candidate], getattr(creator, f"Individual{n_objectives}"))
