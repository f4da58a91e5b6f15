"""The quality floor: constrained domination in the fitness, and who breeds; the objectives'
signs, which the fitness weights follow."""

from __future__ import annotations

import random

from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import (
    FAILED_COST,
    MAXIMISED,
    OBJECTIVES,
    QUALITY,
    objective_value,
    quality_of,
)
from dogma_evolve.evolution.selection import assign_rank_and_crowding, survivors
from dogma_evolve.evolution.strategies import below_floor, make_strategy
from dogma_evolve.evolution.types import MAX_OBJECTIVES, individual_class


def _candidates(points: list[tuple[float, float]], floor: float | None) -> list:
    cls = individual_class(2)
    out = []
    for q, params in points:
        c = cls(object())
        cost = FAILED_COST if below_floor(q, floor) else params
        c.fitness.values = (q, cost)
        out.append(c)
    return out


def test_every_candidate_above_the_floor_survives_before_any_below() -> None:
    # tiny models at chance are Pareto-optimal on (quality, params) without a floor
    points = [(0.01, 1_000.0), (0.02, 2_000.0), (0.00, 500.0), (0.30, 200_000.0), (0.10, 90_000.0)]
    plain = survivors(_candidates(points, None), 2)
    assert {c.fitness.values[0] for c in plain} != {0.30, 0.10}  # the extremes win without it
    floored = survivors(_candidates(points, 0.05), 2)
    assert sorted(c.fitness.values[0] for c in floored) == [0.10, 0.30]
    # below the floor, quality alone orders them
    ranked = _candidates(points, 0.05)
    assign_rank_and_crowding(ranked)
    below = sorted((c for c in ranked if c.fitness.values[0] < 0.05), key=lambda c: c.rank)
    assert [c.fitness.values[0] for c in below] == [0.02, 0.01, 0.00]


def test_only_candidates_at_or_above_the_floor_breed_while_two_do() -> None:
    strategy = make_strategy("nsga2", quality_floor=0.05)
    population = _candidates([(0.01, 1e3), (0.02, 2e3), (0.0, 5e2), (0.3, 2e5), (0.1, 9e4), (0.2, 3e5)], 0.05)
    strategy.prepare(population)
    mates = strategy.mates(population, 200, random.Random(0))
    assert {c.fitness.values[0] for c in mates} <= {0.3, 0.1, 0.2}
    lone = population[:4]  # one above the floor: the best two by quality breed, not everyone
    strategy.prepare(lone)
    drawn = [c.fitness.values[0] for c in strategy.mates(lone, 400, random.Random(1))]
    assert set(drawn) == {0.3, 0.02}
    assert 150 < drawn.count(0.3) < 250  # even odds between the two
    # aging evolution and random search are left as published
    assert make_strategy("aging", 3, 0.05).quality_floor is None
    assert make_strategy("regularized", 3, 0.05).quality_floor is None


def test_a_run_stored_before_the_floor_resumes_without_one() -> None:
    stored = RunConfig().to_dict()
    assert stored["quality_floor"] == 0.05
    del stored["quality_floor"]
    assert RunConfig.from_dict(stored).quality_floor is None
    assert RunConfig.from_dict(RunConfig().to_dict()).quality_floor == 0.05


def test_the_objectives_signs_are_the_fitness_weights() -> None:
    # quality, the first objective, is the one maximised; every further one is a cost
    assert [o for o, spec in OBJECTIVES.items() if spec.weight == MAXIMISED] == [QUALITY]
    assert list(OBJECTIVES)[0] == QUALITY
    names = list(OBJECTIVES)
    for n in range(1, MAX_OBJECTIVES + 1):
        weights = individual_class(n)(object()).fitness.weights
        assert weights == tuple(OBJECTIVES[o].weight for o in names[:n])
    # a missing metric is the failure cost; quality falls back to accuracy, then 0
    assert objective_value({}, "params") == FAILED_COST
    assert objective_value({"latency": 2, "infer_latency_ms": 3}, "latency") == 3.0
    assert quality_of({"quality": 0.2, "accuracy": 0.5}) == 0.2
    assert quality_of({"accuracy": 0.5}) == 0.5 and quality_of({}) == 0.0
