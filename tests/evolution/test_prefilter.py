"""The free pre-filter: a child that cannot beat chance by construction is `filtered`.

It is stored (status `filtered`, the reason, the space's cost metrics), never sent to the
pool, not counted in `spent` (nor on resume), not a failure, and never a cache answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.evolution.engine import Engine, RunConfig
from dogma_evolve.evolution.evaluating import FAILED_QUALITY, FILTERED
from dogma_evolve.evolution.report.summary import report_lines, run_report
from dogma_evolve.evolution.spaces.dogma.identity import canonical
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.genome import Genome
from dogma_evolve.store import EVALUATION_STATUSES, Store

CONFIG = RunConfig(population=4, generations=1, steps=3, seed=7, max_params=60_000)
PINNED = DogmaSpace.from_config(CONFIG).pinned


def _genome(kinds: list[tuple[str, str]], d_model: int = 32) -> Genome:
    """s0 + one coding region of (base type, kind) bases, in canonical form."""
    doc = {
        "regions": [
            {"id": "s0", "type": "structural", "settings": {"d_model": d_model, **PINNED}},
            {"id": "c1", "type": "coding", "bases": [{"base": b, "kind": k, "params": {}} for b, k in kinds]},
        ]
    }
    return canonical(Genome.from_dict(doc))


MIXERLESS = _genome([("A", "swiglu"), ("A", "mlp")])  # every position sees only its own token
MIXERS = [_genome([("T", "attention"), ("A", "swiglu")], d) for d in (16, 24, 32)]


class FakePool:
    """Answers with a made-up score per genome and remembers the requests (no training)."""

    def __init__(self) -> None:
        self.requests: list[EvalRequest] = []

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: Callable[[EvalResult], None] | None = None
    ) -> list[EvalResult]:
        out = []
        for request in requests:
            self.requests.append(request)
            score = int(hashlib.sha256(request.genome_id.encode()).hexdigest()[:6], 16) / 0xFFFFFF
            out.append(EvalResult.for_request(request, "ok", metrics={"accuracy": score, "quality": score}))
            if on_result:
                on_result(out[-1])
        return out


@pytest.fixture
def store(tmp_path: Any) -> Any:
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as s:
        yield s


@pytest.fixture
def seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = [MIXERLESS, *MIXERS]
    monkeypatch.setattr(DogmaSpace, "initial", lambda self, size, rng: list(seeds))


def test_the_dogma_space_filters_a_mixerless_genome() -> None:
    space = DogmaSpace.from_config(CONFIG)
    reason = space.prefilter(MIXERLESS)
    assert isinstance(reason, str) and "mixer" in reason
    assert all(space.prefilter(g) is None for g in MIXERS)
    assert FILTERED in EVALUATION_STATUSES  # storable (a Python check: no migration)


def test_a_filtered_child_is_stored_never_trained_and_not_spent(store: Store, seeded: None) -> None:
    pool = FakePool()
    engine = Engine(CONFIG, store, pool)
    engine.run()
    requested = [r.genome_id for r in pool.requests]
    assert MIXERLESS.id not in requested
    assert engine.spent == len(requested)  # the filtered child costs nothing
    (rec,) = [i for i in store.individuals(engine.run_id) if i.genome_id == MIXERLESS.id]
    assert rec.status == FILTERED and rec.generation == 0 and rec.evaluation is not None
    assert "mixer" in (rec.evaluation.reason or "")
    costs = DogmaSpace.from_config(CONFIG).cost_metrics(MIXERLESS)
    assert rec.evaluation.metrics == costs  # nothing besides the space's cost metrics
    first = engine.reports[0]
    assert first.filtered == 1 and first.failed == 0
    assert first.evaluated + first.cached + first.filtered == first.births
    # resume counts what was really spent, not the filtered row
    assert engine.evaluator.count_spent() == engine.spent
    # the report: filtered, not a failure, no evaluation of compute
    data = run_report(store, engine.run_id)
    gen0 = data["generations"][0]
    assert gen0["filtered"] == 1 and gen0["failed"] == 0 and gen0["evaluated"] == len(MIXERS)
    assert FILTERED not in data["failures"] and data["filtered"] == 1
    assert data["compute"]["evaluations"] == len(requested)
    assert any(line.startswith("filtered: 1 ") for line in report_lines(data))


def test_a_filtered_child_gets_the_failed_fitness(store: Store, seeded: None) -> None:
    population = Engine(RunConfig(**{**CONFIG.to_dict(), "generations": 0}), store, FakePool()).run()
    members = {i.genome.id: i for i in population}  # four births fill the four places
    assert members[MIXERLESS.id].status == FILTERED
    assert members[MIXERLESS.id].fitness.values[0] == FAILED_QUALITY
    assert all(members[g.id].status == "ok" for g in MIXERS)
    assert min(members[g.id].fitness.values[0] for g in MIXERS) > FAILED_QUALITY


def test_the_engine_asks_the_space_and_a_filtered_row_is_never_a_cache_answer(
    store: Store, seeded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = RunConfig(**{**CONFIG.to_dict(), "generations": 0})
    stopped = MIXERS[0].id
    with monkeypatch.context() as m:  # a space whose pre-filter stops one ordinary genome
        m.setattr(DogmaSpace, "prefilter", lambda self, g: "test: stopped" if g.id == stopped else None)
        pool = FakePool()
        first = Engine(config, store, pool)
        first.run()
    assert stopped not in {r.genome_id for r in pool.requests}
    assert MIXERLESS.id in {r.genome_id for r in pool.requests}  # this pre-filter lets it pass
    (rec,) = [i for i in store.individuals(first.run_id) if i.genome_id == stopped]
    assert rec.status == FILTERED and rec.evaluation is not None
    assert rec.evaluation.reason == "test: stopped"
    # another run (the real pre-filter) finds the filtered row under the same natural key
    # (seed policy "genome"), and trains the genome rather than reusing "filtered"
    pool = FakePool()
    second = Engine(config, store, pool)
    second.run()
    assert stopped in {r.genome_id for r in pool.requests}
    assert {i.genome_id: i.status for i in store.individuals(second.run_id)}[stopped] == "ok"
