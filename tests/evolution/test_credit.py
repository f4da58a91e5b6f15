"""Operator credit comes only from full-fidelity outcomes: a multi-fidelity run's children
that were seen only at the first stage (not promoted) earn their operator nothing, since
their parents' qualities are full-fidelity ones (issue 20: credit learnt noise)."""

from __future__ import annotations

from dogma_evolve.evaluation.table import InProcessPool
from dogma_evolve.evolution.engine import Engine, RunConfig
from dogma_evolve.store import Store


def test_only_children_trained_in_full_or_failed_earn_credit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = RunConfig(
        population=4,
        generations=2,
        steps=5,
        min_steps=3,
        promote=0.25,
        task="mqar",
        seed=3,
        max_params=12_000,
    )
    with Store(f"sqlite:///{tmp_path / 'credit.db'}") as store:
        engine = Engine(config, store, InProcessPool())
        engine.run()
        bred = [r for r in store.individuals(engine.run_id) if r.generation > 0 and r.operator]
        full = engine.evaluator.full_fidelity

        def credited(rec) -> bool:  # type: ignore[no-untyped-def]
            rows = [e for e in rec.evaluations if e.task == config.task]
            return any(e.fidelity == full for e in rows) or any(e.status != "ok" for e in rows)

        expected = sum(credited(r) for r in bred)
        trials = sum(p.trials for p in store.policy(engine.run_id))
    low_only = [r for r in bred if not credited(r)]
    assert low_only, "the run must have children seen only at the first stage for the test to mean anything"
    assert trials == expected  # one trial per child trained in full (or failed), none per low-only child
