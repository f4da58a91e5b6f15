"""Selection: NSGA-II over (quality ↑, cost ↓) with DEAP's non-dominated sorting.

Survivors: `tools.selNSGA2` on parents + children (μ + λ). Mating: binary tournaments
on (front rank ↑, crowding distance ↓), the crowded-comparison operator of Deb et al.
(2002).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from deap import tools

from evolution.types import Candidate


def assign_rank_and_crowding(population: Sequence[Candidate]) -> None:
    """Set `rank` (0 = Pareto front) and `fitness.crowding_dist` on every individual."""
    fronts = tools.sortNondominated(list(population), len(population))
    for rank, front in enumerate(fronts):
        tools.emo.assignCrowdingDist(front)
        for ind in front:
            ind.rank = rank


def survivors(population: Sequence[Candidate], k: int) -> list[Candidate]:
    """The k individuals NSGA-II keeps."""
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


def pareto_front(population: Sequence[Candidate]) -> list[Candidate]:
    """The non-dominated individuals, best quality first."""
    front = tools.sortNondominated(list(population), len(population), first_front_only=True)[0]
    return sorted(front, key=lambda ind: (-ind.fitness.values[0], *ind.fitness.values[1:]))
