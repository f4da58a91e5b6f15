"""The engine's rules as plain functions (`evolution.rules`): the same numbers the `Evaluator`
makes with them, the readers' results without an evaluator, and the one cache rule that the
engine's cache and a training run's look-up share."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dogma_evolve.evaluation.tasks import derive_seed
from dogma_evolve.evolution import rules
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.evaluating import Evaluator
from dogma_evolve.evolution.objectives import FAILED_COST
from dogma_evolve.evolution.spaces.dogma.seeds import scale_down
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.evolution.types import individual_class
from dogma_evolve.genome import PRESETS, Genome
from dogma_evolve.store import EvaluationIn, GenomeIn, IndividualIn, Store, by_slot
from dogma_evolve.store.keys import EvalKey


def _quiet(*_: Any) -> None:
    pass


def _genome(width: int = 32, depth: int = 1) -> Genome:
    space = DogmaSpace.from_config(RunConfig())
    return Genome.from_dict(scale_down(PRESETS["llama3-8b"](), width, depth, space.pinned))


@pytest.mark.parametrize("policy", ["genome", "run"])
def test_the_seed_rule_is_the_evaluators(policy: str, tmp_path) -> None:
    config = RunConfig(seed=5, seed_policy=policy)
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as store:
        evaluator = Evaluator(config, DogmaSpace.from_config(config), store, "run", _quiet)
        for task in (config.task, "mqar"):
            for repeat in (0, 1, 3):
                seed = rules.training_seed(policy, 5, config.task, "g1", task, repeat)
                assert seed == evaluator.seed_for("g1", task, repeat)
    if policy == "genome":  # the same in every run
        assert rules.training_seed(policy, 1, "a", "g1", "mqar") == derive_seed("eval", "g1", "mqar")
    else:
        assert rules.training_seed(policy, 5, "mqar", "g1", "mqar") == derive_seed(5, "g1")
        assert rules.training_seed(policy, 5, "a", "g1", "mqar") == derive_seed(5, "g1", "mqar")
    base = rules.training_seed(policy, 5, "a", "g1", "mqar")
    assert rules.training_seed(policy, 5, "a", "g1", "mqar", 2) == derive_seed(base, "repeat", 2)


def test_the_fitness_rule_is_the_evaluators(tmp_path) -> None:
    objectives = ("quality", "params")
    assert rules.fitness("ok", {"quality": 0.5, "params": 10}, None, objectives, None) == (0.5, 10.0)
    failed = (rules.FAILED_QUALITY, FAILED_COST)
    assert rules.fitness("error", {"quality": 0.5}, None, objectives, None) == failed
    assert rules.fitness(None, {}, None, objectives, None) == failed
    assert rules.fitness("ok", {"quality": 0.5}, "too big", objectives, None) == failed
    assert rules.fitness("ok", {"quality": 0.1, "params": 10}, None, objectives, 0.2) == (0.1, FAILED_COST)
    assert rules.fitness("ok", {"accuracy": 0.3}, None, ("quality",), None) == (0.3,)
    config = RunConfig(objectives=objectives, quality_floor=0.2)
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as store:
        evaluator = Evaluator(config, DogmaSpace.from_config(config), store, "run", _quiet)
        cand = individual_class(2)(_genome())
        for status, metrics in [
            ("ok", {"quality": 0.5, "params": 7}),
            ("ok", {"quality": 0.1}),
            ("timeout", {}),
        ]:
            cand.status, cand.metrics = status, metrics
            assert evaluator.fitness(cand) == rules.fitness(status, metrics, None, objectives, 0.2)


@pytest.mark.parametrize("budget", ["steps", "flops"])
def test_the_fidelity_rule_is_the_evaluators(budget: str, tmp_path) -> None:
    config = RunConfig(task="suite", budget=budget, min_steps=20, steps=100, max_params=250_000)
    space = DogmaSpace.from_config(config)
    flops_task = rules.budget_task(config.budget, config.tasks[0], config.task_code)
    assert (flops_task is None) == (budget == "steps")
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as store:
        evaluator = Evaluator(config, space, store, "run", _quiet)
        for genome in (_genome(32, 1), _genome(64, 2)):
            for final in (True, False):
                steps = rules.fidelity(
                    space,
                    genome,
                    final,
                    steps=config.steps,
                    first_fidelity=config.first_fidelity,
                    max_params=config.max_params,
                    flops_task=flops_task,
                )
                assert steps == evaluator.fidelity_for(individual_class(1)(genome), final)
                if budget == "steps":
                    assert steps == (space.full_fidelity(100) if final else config.first_fidelity)


def test_promotions_are_the_promoted_fraction_of_the_stage_at_most_the_successful() -> None:
    assert rules.promotions(0, 10, 0.5) == 0
    assert rules.promotions(8, 10, 0.25) == 3
    assert rules.promotions(2, 10, 0.5) == 2


def _row(status: str = "ok", **metrics: Any) -> Any:
    return SimpleNamespace(status=status, metrics=metrics)


def test_the_one_cache_rule() -> None:
    assert rules.reusable(_row(), "fp32", ())  # no precision recorded: fp32
    assert rules.reusable(_row(precision="bf16"), "bf16", ())
    assert not rules.reusable(_row(precision="bf16"), "fp32", ())
    assert not rules.reusable(_row(rules.FILTERED), "fp32", ())  # nothing was trained
    assert rules.reusable(_row("timeout"), "fp32", ())  # a failure is evidence (the engine's cache)
    assert rules.reusable(_row(plugins=["p#1"]), "fp32", ("p#1", "q#2"))
    assert not rules.reusable(_row(plugins=["p#1"]), "fp32", ("p#2",))


def test_the_cache_answer_is_the_runs_own_row_else_a_reusable_one(tmp_path) -> None:
    genome = _genome()
    key = EvalKey(genome.id, "mqar", 2, 7)
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as store:

        def run_with(status: str, metrics: dict[str, Any]) -> str:
            run_id = store.create_run({}, seed=0, task="mqar")
            store.commit_generation(
                run_id,
                0,
                genomes=[GenomeIn(genome.id, genome.to_yaml(), "x")],
                individuals=[IndividualIn(0, genome.id, 0)],
                evaluations=[EvaluationIn(*key, status, metrics, individual=by_slot(0))],
                members=[by_slot(0)],
            )
            return run_id

        other = run_with("crash", {"plugins": ["p#1"]})
        fresh = store.create_run({}, seed=0, task="mqar")
        assert rules.cache_answer(store, key, fresh, "fp32", ()) == (None, False)  # another plugin's
        rec, here = rules.cache_answer(store, key, fresh, "fp32", ("p#1",))
        assert rec is not None and rec.run_id == other and not here
        rec, here = rules.cache_answer(store, key, other, "bf16", ())
        assert rec is not None and here  # a run's own row, whatever it records
