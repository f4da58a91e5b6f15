"""The loop on a real store with in-process evaluation: caching, lineage, resume, failures."""

from __future__ import annotations

import pytest

from dogma_evolve.evaluation import EvalResult, evaluate
from dogma_evolve.evolution.engine import Engine, RunConfig, best_of
from dogma_evolve.store import Store


class CountingPool:
    """Evaluates in this process and remembers every request (the engine's pool protocol)."""

    def __init__(self, fail_every: int = 0):
        self.requests = []
        self.fail_every = fail_every

    def evaluate(self, requests, on_result=None):
        results = []
        for request in requests:
            self.requests.append(request)
            if self.fail_every and len(self.requests) % self.fail_every == 0:
                result = EvalResult.for_request(request, "crash", "injected failure")
            else:
                result = evaluate(request)
            results.append(result)
            if on_result:
                on_result(result)
        return results


CONFIG = RunConfig(population=4, generations=2, steps=3, seed=3, max_params=60_000)


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as s:
        yield s


def test_each_genome_is_evaluated_once_per_run(store):
    pool = CountingPool()
    engine = Engine(CONFIG, store, pool)
    engine.run()
    keys = [(r.genome_id, r.fidelity, r.seed) for r in pool.requests]
    assert len(keys) == len(set(keys)), "a genome was trained twice in one run"
    born = store.individuals(engine.run_id)
    # a `filtered` birth (the space's pre-filter) has its row but was never sent to the pool
    evaluated = {i.genome_id for i in born if i.evaluation and i.status != "filtered"}
    assert evaluated == {r.genome_id for r in pool.requests}
    counted = sum(r.cached + r.evaluated + r.filtered for r in engine.reports)
    assert counted == len(born)


def test_children_carry_parents_operator_and_change(store):
    engine = Engine(CONFIG, store, CountingPool())
    engine.run()
    born = [i for i in store.individuals(engine.run_id) if i.generation > 0]
    bred = [i for i in born if i.operator]
    assert bred
    # the others are the surrogate's picks of random genomes (or immigrants): no parents
    assert not any(i.parents for i in born if not i.operator)
    assert len(born) - len(bred) == sum(r.explorers + r.immigrants for r in engine.reports)
    for child in bred:
        assert child.parents and child.operator and child.change["op"] == child.operator
        assert {"location", "before", "after"} <= set(child.change)
        for pid in child.parents:
            assert store.individual(pid).generation < child.generation


def test_failures_are_results_and_never_survive_over_working_models(store):
    engine = Engine(CONFIG, store, CountingPool(fail_every=3))
    population = engine.run()
    failed = [i for i in store.individuals(engine.run_id) if i.status == "crash"]
    assert failed and all(i.evaluation.reason == "injected failure" for i in failed)
    assert store.get_run(engine.run_id).status == "finished"
    assert best_of(population).status == "ok"


def test_resume_continues_from_the_last_committed_generation(store):
    config = RunConfig(**{**CONFIG.to_dict(), "generations": 1})
    first = Engine(config, store, CountingPool())
    first.run()
    pool = CountingPool()
    resumed = Engine.resume(first.run_id, store, pool, generations=2)
    resumed.run()
    record = store.get_run(first.run_id)
    assert record.last_generation == 2 and record.status == "finished"
    assert [r.generation for r in resumed.reports] == [2]  # generations 0 and 1 not redone
    assert {i.generation for i in store.individuals(first.run_id)} == {0, 1, 2}
