"""Search strategies through one loop: who breeds, who survives.

- `nsga2` (default): binary crowded tournaments for mating, NSGA-II (mu + lambda) survival.
  With a quality floor (`RunConfig.quality_floor`) the candidates below it carry the worst
  costs (`Evaluator.fitness`), so every candidate at or above it dominates them, and only
  those at or above it breed while at least two are: in a space where most genomes learn
  nothing at the training budget, binary tournaments over the whole population would
  spend most children on mutating genomes that score at chance.
- `regularized`: aging evolution (Real et al. 2019): each parent is the best of a random
  sample of S members; every child joins and the oldest members die (population P).
- `random`: children are fresh samples of the space; the population keeps the NSGA-II
  best, only for reporting (random search does not use it).

Each strategy sees the same store, budget, cache, lineage and meta-policy; a strategy is
only `mates(population, n, rng)` and `survivors(population, children, k)`.

`STRATEGIES` is the one registry: name -> factory (the class's `of(sample_size,
quality_floor)`, which builds it from a run's options; `make_strategy` calls it);
`RunConfig` checks `--strategy` against it and the parser takes its choices from it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Self

from evolution.selection import assign_rank_and_crowding, survivors, tournament
from evolution.types import Candidate


def _key(ind: Candidate) -> tuple[float, float]:
    return (ind.rank, -ind.fitness.crowding_dist)


def below_floor(quality: float, floor: float | None) -> bool:
    """Whether a quality misses the run's floor (`RunConfig.quality_floor`; None: none)."""
    return floor is not None and quality < floor


class NSGA2:
    name = "nsga2"
    breeds = True

    def __init__(self, quality_floor: float | None = None):
        self.quality_floor = quality_floor

    @classmethod
    def of(cls, sample_size: int, quality_floor: float | None) -> Self:
        """The strategy of a run's options (`RunConfig.sample_size`, `quality_floor`)."""
        return cls(quality_floor)

    def prepare(self, population: Sequence[Candidate]) -> None:
        assign_rank_and_crowding(population)

    def breeders(self, population: Sequence[Candidate]) -> list[Candidate]:
        """The members that may breed: those at or above the quality floor when at least
        two are, else everyone."""
        above = [c for c in population if not below_floor(c.fitness.values[0], self.quality_floor)]
        return above if len(above) >= 2 else list(population)

    def mates(self, population: Sequence[Candidate], n: int, rng: random.Random) -> list:
        pool = self.breeders(population)
        return [tournament(pool, rng) for _ in range(n)]

    def survivors(self, population: Sequence[Candidate], children: Sequence[Candidate], k: int) -> list:
        return survivors(list(population) + list(children), k)


class Regularized(NSGA2):
    name = "regularized"

    def __init__(self, sample_size: int = 3):
        super().__init__(None)  # aging evolution as published: every member may breed
        self.sample_size = sample_size

    @classmethod
    def of(cls, sample_size: int, quality_floor: float | None) -> Self:
        return cls(sample_size)

    def mates(self, population: Sequence[Candidate], n: int, rng: random.Random) -> list:
        out = []
        for _ in range(n):
            sample = rng.sample(list(population), min(self.sample_size, len(population)))
            out.append(min(sample, key=_key))
        return out

    def survivors(self, population: Sequence[Candidate], children: Sequence[Candidate], k: int) -> list:
        everyone = sorted(list(population) + list(children), key=lambda i: i.age)
        kept = everyone[-k:]  # the oldest die, whatever their fitness
        assign_rank_and_crowding(kept)
        return kept


class RandomSearch(NSGA2):
    name = "random"
    breeds = False

    @classmethod
    def of(cls, sample_size: int, quality_floor: float | None) -> Self:
        return cls()  # it breeds nothing: no floor to apply


#: what builds a strategy from a run's options: (sample_size, quality_floor) -> strategy
Factory = Callable[[int, float | None], NSGA2]
#: the registry of strategies, name -> factory (`--strategy` lists them in this order)
STRATEGIES: dict[str, Factory] = {cls.name: cls.of for cls in (NSGA2, Regularized, RandomSearch)}


def make_strategy(name: str, sample_size: int = 3, quality_floor: float | None = None) -> NSGA2:
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {tuple(STRATEGIES)}, not {name!r}")
    return STRATEGIES[name](sample_size, quality_floor)


__all__ = ["NSGA2", "STRATEGIES", "Factory", "RandomSearch", "Regularized", "below_floor", "make_strategy"]
