"""`evolve run --select-by long`: the search's finalists trained longer, the best of them the
run's best.

A search compares candidates after ``steps`` (300) training steps at its own size, and that
fitness favours what learns fastest: at 4x the size it ranks the compute-optimal text loss of a
held-out panel at Spearman +0.52 [+0.17, +0.77], while the same fitness trained 1,000 steps
ranks it at +0.82 [+0.63, +0.93] (docs/results.md, "At 4x the size"), and on a second held-out
panel (seed 13, 32 of 40 members) at +0.92 [+0.83, +0.96]. Training every candidate
that long costs 3.3 times the search; training its few best that long costs a minute. So after
the search's last generation:

* the **finalists** are the run's :data:`FINALISTS` best individuals evaluated in full, one a
  genome, in `selection.best_of`'s order (`StoredRun.finalists`: quality, then cost, as the
  search's own best is chosen; a confirmed quality is its mean over seeds);
* each trains :data:`LONG_STEPS` steps on the run's task under its own training seed (the
  search's repeat 0: `rules.training_seed`), through the run's pool, in a training run of its
  own (kind ``select``, `evolution.training_run`: natural keys, so a killed stage resumes
  without retraining and `evolve run --resume` finishes it);
* the run's best (`StoredRun.best`: `run`'s summary, `report`, `export --best`, the Python API)
  is the finalist of highest quality after :data:`LONG_STEPS` steps (ties: the search's
  order); until every finalist has its row, the search's own best stands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dogma_evolve.evaluation.precision import pool_precision
from dogma_evolve.evolution import rules
from dogma_evolve.evolution.objectives import quality_of
from dogma_evolve.evolution.training_run import (
    Point,
    TrainingRecorder,
    lookup_all,
    newest_run,
    train_recorded,
)
from dogma_evolve.genome import Genome

if TYPE_CHECKING:
    from dogma_evolve.evolution.study.results import Individual
    from dogma_evolve.evolution.study.stored_run import StoredRun
    from dogma_evolve.store import EvaluationRecord, Store

LONG_STEPS = 1_000  # the fitness budget certified at 4x on the held-out panel's 32 smallest
FINALISTS = 4
KIND = "select"  # the finalists' training run (`store.RUN_KINDS`)
ENTRY = "finalists_of"  # its config's key: the search's run id


@dataclass
class FinalistPoint(Point):
    """One finalist's long training: the search's individual it stands for."""

    individual_id: int = 0
    search_quality: float = 0.0


def finalist_points(stored: StoredRun, finalists: Sequence[tuple[Any, Individual]]) -> list[FinalistPoint]:
    """The trainings of ``finalists`` (`StoredRun.finalists`), best by the search first."""
    cfg = stored.config
    return [
        FinalistPoint(
            genome_id=i.genome_id,
            task=cfg.task,
            steps=LONG_STEPS,
            seed=rules.training_seed(cfg.seed_policy, cfg.seed, cfg.task, i.genome_id, cfg.task, 0),
            individual_id=i.id,
            search_quality=quality_of(c.metrics),
        )
        for c, i in finalists
    ]


class FinalistRecorder(TrainingRecorder):
    """The ``select`` run of search ``stored``: one generation a finalist trained."""

    def __init__(
        self, stored: StoredRun, precision: str, finalists: Sequence[tuple[Any, Individual]]
    ) -> None:
        self.genomes = {i.genome_id: c.genome for c, i in finalists}  # parsed by the run's space
        points = finalist_points(stored, finalists)
        self.search_run = stored.run_id
        config = {
            ENTRY: stored.run_id,
            "steps": LONG_STEPS,
            "finalists": FINALISTS,
            "task": stored.config.task,
        }
        super().__init__(
            stored.store, KIND, config, ENTRY, stored.config.task, precision, points, stored.config.timeout_s
        )

    def genome_of(self, point: Any) -> Genome:
        return self.genomes[point.genome_id]

    def change_of(self, point: Any) -> dict[str, Any]:
        return {"finalist_of": self.search_run, "individual": point.individual_id, "steps": LONG_STEPS}


def run_finalists(stored: StoredRun, pool: Any, on_point: Callable[..., None] | None = None) -> None:
    """Train the finalists of ``stored`` that its store does not hold yet, on ``pool``: of a
    run stored with ``select_by: long`` only, the config every reader of it sees (a resume's
    ``--select-by`` changes that invocation's, not the stored one)."""
    if stored.stored_config.get("select_by") != "long":
        return
    finalists = stored.finalists(FINALISTS)
    if not finalists:
        return
    recorder = FinalistRecorder(stored, pool_precision(stored.config.precision, pool), finalists)
    todo = lookup_all([recorder])
    train_recorded([recorder], todo, lambda: nullcontext(pool), on_point)


def _rows(store: Store, run_id: str, points: Sequence[FinalistPoint]) -> dict[str, EvaluationRecord]:
    """The finalists' rows in the newest ``select`` run of search ``run_id``, by genome."""
    select = newest_run(store, KIND, ENTRY, run_id)
    if select is None:
        return {}
    rows = {}
    for p in points:
        rec = store.find_evaluation(*p.key(), run_id=select.id)
        if rec is not None:
            rows[p.genome_id] = rec
    return rows


def finalist_results(stored: StoredRun) -> list[dict[str, Any]]:
    """Each finalist, best by the search first: its individual, genome, search quality, and
    its status and quality after :data:`LONG_STEPS` steps (None until trained)."""
    points = finalist_points(stored, stored.finalists(FINALISTS))
    rows = _rows(stored.store, stored.run_id, points)
    out = []
    for p in points:
        rec = rows.get(p.genome_id)
        ok = rec is not None and rec.status == "ok"
        out.append(
            {
                "individual_id": p.individual_id,
                "genome_id": p.genome_id,
                "search_quality": p.search_quality,
                "steps": LONG_STEPS,
                "status": None if rec is None else rec.status,
                "quality": quality_of(rec.metrics) if ok and rec is not None else None,
            }
        )
    return out


def long_choice_id(stored: StoredRun) -> int | None:
    """The individual id of the finalist of highest quality after :data:`LONG_STEPS` steps
    (ties: the search's order); None while a finalist has no row, or when none trained
    successfully."""
    results = finalist_results(stored)
    if not results or any(r["status"] is None for r in results):
        return None
    trained = [r for r in results if r["quality"] is not None]
    if not trained:
        return None
    return int(max(trained, key=lambda r: r["quality"])["individual_id"])  # max keeps the first of equals


__all__ = [
    "FINALISTS",
    "LONG_STEPS",
    "FinalistPoint",
    "FinalistRecorder",
    "finalist_points",
    "finalist_results",
    "long_choice_id",
    "run_finalists",
]
