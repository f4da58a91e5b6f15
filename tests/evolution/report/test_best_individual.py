"""`evolve export --best` of a run that is no search (an `evolve scale` or `ablate` run): its best
evaluated individual. A search's best is `StoredRun.best`, which every reader shares
(tests/evolution/test_confirm.py)."""

from __future__ import annotations

from types import SimpleNamespace

from dogma_evolve.evolution.report.summary import best_individual


class _Store:
    def __init__(self, individuals: list[SimpleNamespace]) -> None:
        self._individuals = individuals

    def get_run(self, run_id: str) -> object:
        return SimpleNamespace(id=run_id, config={}, kind="ablate")

    def individuals(self, run_id: str) -> list[SimpleNamespace]:
        return self._individuals


def _ind(id: int, status: str = "ok", **metrics: float) -> SimpleNamespace:
    return SimpleNamespace(id=id, status=status, metrics=metrics)


def test_best_is_highest_quality_not_raw_accuracy() -> None:
    # Micro-averaged accuracy favours the candidate that aces the easy tasks; the run's
    # objective is quality (normalised accuracy), and so is its best.
    store = _Store(
        [
            _ind(1, accuracy=0.77, quality=0.54, params=70_000),
            _ind(2, accuracy=0.70, quality=0.62, params=187_000),
            _ind(3, status="failed", accuracy=0.99, quality=0.99, params=10),
        ]
    )
    assert best_individual(store, "r").id == 2  # type: ignore[arg-type]


def test_ties_go_to_fewer_parameters_then_the_older_id() -> None:
    store = _Store(
        [_ind(5, quality=0.5, params=900), _ind(4, quality=0.5, params=100), _ind(3, quality=0.5, params=100)]
    )
    assert best_individual(store, "r").id == 3  # type: ignore[arg-type]


def test_results_without_quality_rank_by_accuracy() -> None:
    store = _Store([_ind(1, accuracy=91.0, params=5), _ind(2, accuracy=93.5, params=5)])
    assert best_individual(store, "r").id == 2  # type: ignore[arg-type]
