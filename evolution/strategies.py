"""Search strategies through one loop: who breeds, who survives.

Every strategy selects on what the run's objectives ask for (`RunConfig.objectives`,
`evolution.selection`): with the default, quality alone, members are ordered by
`selection.quality_key` (quality, then fewer parameters, smaller state, older); with
several objectives `nsga2` is NSGA-II over them.

- `nsga2` (the default under several objectives): binary tournaments for mating, (μ + λ) survival: the best
  `population` by quality under one objective, NSGA-II's under several. With a quality
  floor (`RunConfig.quality_floor`) only candidates at or above it breed while at least two
  are; when fewer do, the best two by quality breed (two breeders are each parent at even
  odds):
  in a space where most genomes learn nothing at the training budget, tournaments over the
  whole population would spend most children on genomes that score at chance.
- `aging` (alias `regularized`, the name runs were stored under): aging evolution as
  published (Real et al. 2019, "Regularized evolution for image classifier architecture
  search"): each parent is the best *by quality* (`quality_key`) of a uniform sample of S
  members (`RunConfig.sample_size`), mutation only (`crossover = False`), every child joins
  and the oldest die. A generation of B children is B cycles of the paper's asynchronous
  form: B parents drawn from the current population, B children evaluated in parallel,
  then the B oldest die (the population is the youngest P). Every member may breed, floor
  or not, as published.
- `local` (the default under one objective, `evolution.config.default_strategy`): restart
  local search. Every child is a neighbour (a mutation, no crossover) of one of the best
  `parents` members by quality (`RunConfig.parents`, 3; 1: the incumbent alone), drawn
  uniformly; the engine's `seen` set keeps each neighbour new. Breeding around the best
  few rather than the incumbent alone hedges against an incumbent whose observed quality
  was a lucky draw (on NAS-Bench-201's tuning seeds, 3 parents beat 1 on all three data
  sets, docs/results.md). After `patience` generations without a child better than the incumbent, the next
  generation is a restart: it breeds nothing (`breeds` is False), so the engine fills it
  with random samples, and the population becomes those samples (the incumbent the best
  of them). The run's best so far stays in the store and the elite archive.
- `random`: children are fresh samples of the space; the population keeps the best, only
  for reporting (random search does not use it).

Each strategy sees the same store, budget, cache, lineage and meta-policy; a strategy is
`breeds`, `crossover` (whether the engine may cross two mates), `prepare(population)`,
`mates(population, n, rng)` and `survivors(population, children, k)`.

`STRATEGIES` is the one registry: name -> factory (the class's `of(sample_size,
quality_floor, parents)`, which builds it from a run's options; `make_strategy` calls it);
`RunConfig` checks `--strategy` against it and the parser takes its choices from it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Self

from dogma_evolve.evolution.selection import (
    assign_rank_and_crowding,
    by_quality,
    quality_key,
    survivors,
    tournament,
)
from dogma_evolve.evolution.types import Candidate

PATIENCE = 3  # `local`: generations without improving the incumbent before a restart
PARENTS = 3  # `local`: children are neighbours of the best this many members


def below_floor(quality: float, floor: float | None) -> bool:
    """Whether a quality misses the run's floor (`RunConfig.quality_floor`; None: none)."""
    return floor is not None and quality < floor


class NSGA2:
    """Tournaments among the breeders, (μ + λ) survival (`selection.survivors`)."""

    name: ClassVar[str] = "nsga2"
    crossover: ClassVar[bool] = True  # the engine may cross two mates (`crossover_rate`)

    def __init__(self, quality_floor: float | None = None):
        self.quality_floor = quality_floor

    @classmethod
    def of(cls, sample_size: int, quality_floor: float | None, parents: int = PARENTS) -> Self:
        """The strategy of a run's options (`RunConfig.sample_size`, `quality_floor`,
        `parents`)."""
        return cls(quality_floor)

    @property
    def breeds(self) -> bool:
        """Whether this generation's children are bred (False: all random samples)."""
        return True

    def prepare(self, population: Sequence[Candidate]) -> None:
        assign_rank_and_crowding(population)

    def breeders(self, population: Sequence[Candidate]) -> list[Candidate]:
        """The members that may breed: those at or above the quality floor when at least
        two are, else the best two by quality (`quality_key`; everyone when fewer)."""
        above = [c for c in population if not below_floor(c.fitness.values[0], self.quality_floor)]
        return above if len(above) >= 2 else by_quality(population)[:2]

    def mates(self, population: Sequence[Candidate], n: int, rng: random.Random) -> list[Candidate]:
        """`n` parents: binary tournaments among the breeders; when they are two (fewer
        than three clear the floor), each parent is one of them at even odds (a tournament
        between two would always pick the same one)."""
        pool = self.breeders(population)
        if len(pool) <= 2:
            return [rng.choice(pool) for _ in range(n)]
        return [tournament(pool, rng) for _ in range(n)]

    def survivors(
        self, population: Sequence[Candidate], children: Sequence[Candidate], k: int
    ) -> list[Candidate]:
        return survivors(list(population) + list(children), k)


class Aging(NSGA2):
    """Aging (regularized) evolution: tournament of S by quality, mutation only, the
    oldest die."""

    name = "aging"
    crossover = False  # as published: mutation only

    def __init__(self, sample_size: int = 3):
        super().__init__(None)  # as published: every member may breed
        self.sample_size = sample_size

    @classmethod
    def of(cls, sample_size: int, quality_floor: float | None, parents: int = PARENTS) -> Self:
        return cls(sample_size)

    def mates(self, population: Sequence[Candidate], n: int, rng: random.Random) -> list[Candidate]:
        """Each parent: the best by `quality_key` of S members drawn uniformly without
        replacement (all of them when fewer than S)."""
        members = list(population)
        out = []
        for _ in range(n):
            sample = rng.sample(members, min(self.sample_size, len(members)))
            out.append(min(sample, key=quality_key))
        return out

    def survivors(
        self, population: Sequence[Candidate], children: Sequence[Candidate], k: int
    ) -> list[Candidate]:
        """The youngest k of members and children (`age`, birth order): the oldest die,
        whatever their quality."""
        everyone = sorted(list(population) + list(children), key=lambda i: i.age)
        kept = everyone[-k:]
        assign_rank_and_crowding(kept)
        return kept


class LocalSearch(NSGA2):
    """Restart local search around the incumbent (the best member by quality).

    Its state is derived from the population alone, so a resumed run continues as the
    uninterrupted one: the population is the incumbent and the youngest `population - 1`
    members since the last restart, so its latest generation G (the largest `generation`
    among members) is the last one bred, and the failures are G minus the incumbent's
    generation, the generations since anything beat it. A restart is due when they reach
    `patience`. (The engine must show it the population, `prepare`, before it reads
    `breeds`; the last population it saw through `prepare` or `survivors` answers.)
    """

    name = "local"
    crossover = False  # neighbours of one genome: mutations only

    def __init__(self, patience: int = PATIENCE, parents: int = PARENTS):
        super().__init__(None)
        if patience < 1:
            raise ValueError(f"patience must be at least 1, not {patience}")
        if parents < 1:
            raise ValueError(f"parents must be at least 1, not {parents}")
        self.patience = patience
        self.parents = parents
        self._population: Sequence[Candidate] | None = None

    @classmethod
    def of(cls, sample_size: int, quality_floor: float | None, parents: int = PARENTS) -> Self:
        return cls(parents=parents)

    @property
    def breeds(self) -> bool:
        """False for a restart generation (the engine then samples every place)."""
        return self._population is None or not self.restart_due(self._population)

    @staticmethod
    def incumbent(population: Sequence[Candidate]) -> Candidate:
        """The best member by `quality_key`, evaluated in full first."""
        return min(population, key=_local_key)

    def failures(self, population: Sequence[Candidate]) -> int:
        """Generations bred since the incumbent was born (0 for an empty population)."""
        if not population:
            return 0
        latest = max(c.generation for c in population)
        return latest - self.incumbent(population).generation

    def restart_due(self, population: Sequence[Candidate]) -> bool:
        """Whether the generation after this population is a restart."""
        return self.failures(population) >= self.patience

    def prepare(self, population: Sequence[Candidate]) -> None:
        assign_rank_and_crowding(population)
        self._population = population

    def mates(self, population: Sequence[Candidate], n: int, rng: random.Random) -> list[Candidate]:
        """`n` parents, each drawn uniformly from the best `parents` members (the incumbent
        first; evaluated in full before any that was not); with `parents` 1, the
        incumbent every time (no draw)."""
        if self.parents == 1:
            return [self.incumbent(population)] * n
        best = sorted(population, key=_local_key)[: self.parents]
        return [rng.choice(best) for _ in range(n)]

    def survivors(
        self, population: Sequence[Candidate], children: Sequence[Candidate], k: int
    ) -> list[Candidate]:
        """After a restart generation: the best k of its samples. Otherwise the incumbent
        of members and children together, and the youngest k - 1 others."""
        if children and self.restart_due(population):
            chosen = by_quality(children)[:k]
        else:
            everyone = list(population) + list(children)
            if not everyone:
                return []
            best = self.incumbent(everyone)
            others = sorted((c for c in everyone if c is not best), key=lambda c: c.age)
            chosen = [best] + (others[-(k - 1) :] if k > 1 else [])
        assign_rank_and_crowding(chosen)
        self._population = chosen
        return chosen


def _local_key(c: Candidate) -> tuple[Any, ...]:
    """Local search's order: evaluated in full first, then `quality_key`."""
    return (not c.record.final, *quality_key(c))


class RandomSearch(NSGA2):
    name = "random"

    @classmethod
    def of(cls, sample_size: int, quality_floor: float | None, parents: int = PARENTS) -> Self:
        return cls()  # it breeds nothing: no floor to apply

    @property
    def breeds(self) -> bool:
        return False


#: what builds a strategy from a run's options: (sample_size, quality_floor, parents) -> strategy
Factory = Callable[[int, float | None, int], NSGA2]
#: the registry of strategies, name -> factory (`--strategy` lists them in this order);
#: `regularized` is the name aging evolution was stored under before, kept for those runs
STRATEGIES: dict[str, Factory] = {
    "nsga2": NSGA2.of,
    "aging": Aging.of,
    "local": LocalSearch.of,
    "random": RandomSearch.of,
    "regularized": Aging.of,
}
#: one line per name, for `--strategy`'s help
STRATEGY_HELP: dict[str, str] = {
    "nsga2": "tournaments, best survive; NSGA-II with several objectives",
    "aging": "aging evolution, Real et al. 2019: best of --sample-size, mutation only, oldest die",
    "local": f"local search around the best --parents, restart after {PATIENCE} generations without a gain",
    "random": "random samples",
    "regularized": "the old name of aging",
}

Regularized = Aging  # the class's former name


def make_strategy(
    name: str, sample_size: int = 3, quality_floor: float | None = None, parents: int = PARENTS
) -> NSGA2:
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {tuple(STRATEGIES)}, not {name!r}")
    return STRATEGIES[name](sample_size, quality_floor, parents)


__all__ = [
    "NSGA2",
    "PARENTS",
    "PATIENCE",
    "STRATEGIES",
    "STRATEGY_HELP",
    "Aging",
    "Factory",
    "LocalSearch",
    "RandomSearch",
    "Regularized",
    "below_floor",
    "make_strategy",
]
