"""DEAP types, created once at import (pickling and Ray need module-level classes).

An individual is a genome in the population with its store id and evaluation; its
fitness is (quality ↑, cost ↓, ...): quality first, then one minimised cost per further
objective (`--objectives`). DEAP's convention holds: an invalid fitness means "not
evaluated yet", which is what makes caching and resume cheap.

DEAP fixes a fitness's weights on its class, so one class per objective count is created
here (1 to MAX_OBJECTIVES); `individual_class(n)` picks it. `Individual` is the default
two-objective class (quality, parameters).
"""

from __future__ import annotations

from typing import Any

from deap import base, creator

WEIGHTS = (1.0, -1.0)
MAX_OBJECTIVES = 5


class Candidate:
    """A genome in the population; `fitness` is attached by the DEAP creator."""

    fitness: Any

    def __init__(self, genome: Any):
        self.genome = genome
        self.id: int | None = None  # store id, once committed
        self.generation: int = 0
        self.seed: int = 0
        self.status: str | None = None  # evaluation status, None = not evaluated
        self.metrics: dict[str, Any] = {}
        self.fidelity: int | str | None = None  # the fidelity its metrics come from
        self.op: str | None = None  # how it was born (None for seeds)
        self.change: dict[str, Any] | None = None
        self.parent_ids: list[int] = []
        self.parents: list[Any] = []  # parent individuals in memory (for credit)
        self.context: str | None = None  # region type the operator touched
        self.results: list[Any] = []  # EvalResults produced in this process
        self.cached_rows: list[Any] = []  # results reused from other runs, copied here
        self.weights: bytes | None = None  # trained weights (safetensors) until committed
        self.age: int = 0  # birth order, for aging evolution
        self.violation: str | None = None  # the hard constraint it breaks, if any
        self.spent_at: int = 0  # run's evaluations when its result was known

    @property
    def result(self) -> Any:
        """The first evaluation made for this individual in this process (or None)."""
        return self.results[0] if self.results else None

    def __repr__(self) -> str:
        return f"Individual(id={self.id}, genome={self.genome.id[:12]}, status={self.status})"


if not hasattr(creator, "FitnessQualityCost"):
    creator.create("FitnessQualityCost", base.Fitness, weights=WEIGHTS)
    creator.create("Individual", Candidate, fitness=creator.FitnessQualityCost)
for _n in range(1, MAX_OBJECTIVES + 1):
    if not hasattr(creator, f"Fitness{_n}"):
        creator.create(f"Fitness{_n}", base.Fitness, weights=(1.0,) + (-1.0,) * (_n - 1))
        creator.create(f"Individual{_n}", Candidate, fitness=getattr(creator, f"Fitness{_n}"))

Individual = creator.Individual


def individual_class(n_objectives: int) -> type:
    """The DEAP individual class whose fitness has `n_objectives` values (quality first)."""
    if n_objectives == 2:
        return creator.Individual
    if not 1 <= n_objectives <= MAX_OBJECTIVES:
        raise ValueError(f"1 to {MAX_OBJECTIVES} objectives, not {n_objectives}")
    return getattr(creator, f"Individual{n_objectives}")
