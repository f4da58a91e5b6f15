"""The default ladder's time budget (`evolution.scale.pace`): list scheduling, the choice of
tokens per parameter from measured paces, the sizes kept, a stored ladder resumed unprobed,
and a real probe of a small rung."""

from __future__ import annotations

import math

import pytest

from dogma_evolve.evolution.scale import train as scale
from dogma_evolve.evolution.scale.ladder import Design
from dogma_evolve.evolution.scale.pace import (
    RATIOS,
    Pace,
    SideBySide,
    choose,
    makespan,
    probe,
    projected_seconds,
)
from dogma_evolve.genome import load_genome

PINNED = {"vocab": 257, "max_len": 64}  # bytelm's


def plans_at(r: float) -> list[scale.Plan]:
    design = Design.of(load_genome("preset:gpt2-small"), PINNED, "preset:gpt2-small", preset=True)
    sizes = [8e3, 25e3, 80e3, 400e3]
    return [scale.make_plan(design, "both", "bytelm_en", sizes, [scale.Budget(per_param=r)], 2)]


def slow(factor: float):
    """A pace per rung proportional to its parameters (``factor`` seconds per step per 1M)."""

    def pace_of(genome, task):
        from dogma_evolve.phenotype import account

        return Pace(overhead_s=1.0, step_s=factor * account(genome).non_embedding_params / 1e6)

    return pace_of


def test_makespan_schedules_the_largest_first_on_the_first_free_worker():
    assert makespan([10, 9, 1, 1], 2) == 11  # 10 | 9, 1, 1
    assert makespan([10, 9, 1, 1], 1) == 21
    assert makespan([5, 5, 5], 8) == 5
    assert makespan([], 2) == 0


def test_points_a_second_plan_shares_are_counted_once():
    (plan,) = plans_at(20)
    paces = {r.genome.id: Pace(0.0, 1.0) for r in plan.rungs}
    once = projected_seconds([plan], paces, 1)
    assert once == sum(p.steps for p in plan.points)
    assert projected_seconds([plan, plan], paces, 1) == once


def test_the_first_ratio_that_fits_is_chosen_and_the_sizes_are_kept():
    made = {r: plans_at(r) for r in RATIOS}
    steps = sum(p.steps for p in made[20.0][0].points)
    # 1 s per step per 1M parameters: project each ratio, then a budget between 10's and 5's
    _, free = choose(made.__getitem__, lambda ps: False, 1e6, 2, slow(1.0))
    assert free.ratio == 20.0 and free.projected_s is not None and list(free.projections) == [20.0]
    _, every = choose(made.__getitem__, lambda ps: False, 1e-9, 2, slow(1.0))
    times = [every.projections[r] for r in RATIOS]
    assert times == sorted(times, reverse=True) and every.ratio == RATIOS[-1]
    assert "over --minutes" in every.message()
    budget = (times[1] + times[2]) / 2 / 60
    plans, choice = choose(made.__getitem__, lambda ps: False, budget, 2, slow(1.0))
    assert choice.ratio == 5.0 and plans is made[5.0] and choice.projected_s == pytest.approx(times[2])
    assert "(not 20)" in choice.message() and "--minutes" in choice.message()
    assert [r.params for r in plans[0].rungs] == [r.params for r in made[20.0][0].rungs]
    assert steps > sum(p.steps for p in plans[0].points) > 0


def test_a_stored_ladder_is_resumed_under_its_ratio_without_a_probe():
    made = {r: plans_at(r) for r in RATIOS}

    def never(genome, task):
        raise AssertionError("probed")

    plans, choice = choose(made.__getitem__, lambda ps: ps is made[10.0], 30, 2, never)
    assert plans is made[10.0] and choice.resumed and choice.projected_s is None
    assert choice.to_dict()["tokens_per_param"] == 10.0 and "resumed" in choice.message()


def test_a_pace_that_cannot_be_measured_keeps_the_default():
    made = {r: plans_at(r) for r in RATIOS}
    plans, choice = choose(made.__getitem__, lambda ps: False, 30, 2, lambda g, t: None)
    assert plans is made[20.0] and choice.ratio == 20.0 and "no probe" in choice.message()


def test_a_real_probe_measures_a_positive_pace_alone_and_side_by_side():
    (plan,) = plans_at(20)
    genome = plan.rungs[0].genome
    alone = probe(genome, "bytelm_en", seed=0, threads=1)
    assert alone is not None and alone.step_s > 0 and alone.overhead_s >= 0
    assert math.isfinite(alone.seconds(100)) and alone.seconds(100) > alone.seconds(10)
    two = SideBySide(2, 1)
    try:  # two processes at once, the slower's pace
        pair = two(genome, "bytelm_en")
    finally:
        two.close()
    assert pair is not None and pair.step_s > 0 and two.pool is None
