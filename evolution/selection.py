"""Selection: on quality alone, or NSGA-II over (quality ↑, cost ↓, ...) with DEAP.

A run's fitness has one value per objective (`RunConfig.objectives`, `evolution.types`).

- One objective (the default, `("quality",)`): candidates are ordered by `quality_key`,
  (quality ↓, params ↑, state_bytes ↑, age ↑): the higher quality first, among equal
  qualities the fewer parameters (then the smaller inference state, read from the
  metrics), then the older (a newcomer must be strictly better to displace a member; the
  order is total, so it does not depend on the order the population is given in, and a
  resumed run orders as the uninterrupted one). Parameters and state are budgets
  (`max_params`, `max_state_bytes`) and this tie-break, never traded against quality.
  `assign_rank_and_crowding` sets `rank` to the place in that order (0 = best) and the
  crowding distance to 0, so the crowded tournament below is a binary tournament on it;
  survivors are the best k (truncation, μ + λ).
- Several objectives: survivors are `tools.selNSGA2` on parents + children (μ + λ);
  `rank` is the non-dominated front (0 = Pareto front); mating is binary tournaments on
  (front rank ↑, crowding distance ↓), the crowded-comparison operator of Deb et al. (2002).

What is *reported* is the same either way: `pareto_front` is the front of (quality ↑,
params ↓) read from the evaluations' metrics, whatever the run selects on.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from deap import tools

from dogma_evolve.evolution.objectives import objective_value, quality_of
from dogma_evolve.evolution.types import Candidate

#: the costs that break ties between equal qualities under one objective, in this order
TIE_BREAK = ("params", "state_bytes")


def single_objective(population: Sequence[Candidate]) -> bool:
    """Whether the population's fitness is quality alone (its class has one weight)."""
    return bool(population) and len(population[0].fitness.weights) == 1


def quality_key(ind: Candidate) -> tuple[float, ...]:
    """Sort key, best first: (-quality, params, state_bytes, age).

    The quality is the fitness's first value (the floor and failures already in it:
    `Evaluator.fitness`); the costs come from the metrics (`objectives.objective_value`,
    `FAILED_COST` when absent), so they break ties without being selected on."""
    costs = tuple(objective_value(ind.metrics, o) for o in TIE_BREAK)
    return (-ind.fitness.values[0], *costs, float(ind.age))


def best_key(i: Candidate) -> tuple[float, ...]:
    """`best_of`'s order: highest quality, then lowest costs (selected on, then the
    tie-break's: `quality_key`)."""
    return (-i.fitness.values[0], *i.fitness.values[1:], *quality_key(i)[1:])


def best_of(population: Sequence[Candidate]) -> Candidate:
    """Highest quality, then lowest costs (`best_key`)."""
    return min(population, key=best_key)


def by_quality(population: Iterable[Candidate]) -> list[Candidate]:
    """The candidates in `quality_key` order (best first)."""
    return sorted(population, key=quality_key)


def assign_rank_and_crowding(population: Sequence[Candidate]) -> None:
    """Set `rank` and `fitness.crowding_dist` on every individual.

    One objective: rank = place in `quality_key` order (0 = best), crowding 0. Several:
    rank = non-dominated front (0 = Pareto front), crowding distance within the front."""
    if single_objective(population):
        for rank, ind in enumerate(by_quality(population)):
            ind.rank = rank
            ind.fitness.crowding_dist = 0.0
        return
    fronts = tools.sortNondominated(list(population), len(population))
    for rank, front in enumerate(fronts):
        tools.emo.assignCrowdingDist(front)
        for ind in front:
            ind.rank = rank


def survivors(population: Sequence[Candidate], k: int) -> list[Candidate]:
    """The k individuals kept: the best k by `quality_key` under one objective, else
    NSGA-II's; ranked (`assign_rank_and_crowding`) among themselves."""
    if single_objective(population):
        chosen = by_quality(population)[:k]
    else:
        chosen = tools.selNSGA2(list(population), k)
    assign_rank_and_crowding(chosen)
    return chosen


def tournament(population: Sequence[Candidate], rng: random.Random) -> Candidate:
    """Binary crowded tournament; `population` must carry ranks (assign_rank_and_crowding)."""
    a, b = rng.sample(list(population), 2) if len(population) > 1 else (population[0],) * 2
    key_a = (a.rank, -a.fitness.crowding_dist)
    key_b = (b.rank, -b.fitness.crowding_dist)
    if key_a == key_b:
        return a if rng.random() < 0.5 else b
    return a if key_a < key_b else b


def pareto_front(population: Iterable[Candidate], floor: float | None = None) -> list[Candidate]:
    """The (quality ↑, params ↓) front of the evaluated candidates, best quality first.

    Read from the metrics (`quality_of`, the `params` metric), not the fitness, so it is
    the same front whether the run selects on quality alone or on several objectives. Only
    candidates whose evaluation is ok count, each genome once; with `floor` (the run's
    `quality_floor`), those below it are left out while any candidate clears it, as the
    selection's constrained domination leaves them behind. Empty when none is ok."""
    unique: dict[str, Candidate] = {}
    for c in population:
        if c.status == "ok" and not c.violation:
            unique.setdefault(c.genome.id, c)
    ok = list(unique.values())
    cleared = [c for c in ok if floor is None or quality_of(c.metrics) >= floor]
    pool = cleared or ok
    front: list[Candidate] = []
    best = float("-inf")
    for c in sorted(pool, key=lambda c: (objective_value(c.metrics, "params"), -quality_of(c.metrics))):
        if quality_of(c.metrics) > best:
            front.append(c)
            best = quality_of(c.metrics)
    return sorted(front, key=lambda c: (-quality_of(c.metrics), objective_value(c.metrics, "params")))


__all__ = [
    "TIE_BREAK",
    "assign_rank_and_crowding",
    "best_of",
    "by_quality",
    "pareto_front",
    "quality_key",
    "single_objective",
    "survivors",
    "tournament",
]
