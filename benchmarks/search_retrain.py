"""Re-training a search run's incumbents under fresh seeds: the fair score of the DOGMA
search benchmark (`benchmarks/search_dogma.py`), at its budget and along its FLOP curve.

A run's incumbent within a budget B is its best full-fidelity observation among the rows
whose cumulative training FLOPs are <= B (`search_flops.incumbent`). Its observation is
biased upward (it is the maximum of noisy draws: the winner's curse), so it is trained again
at the full fidelity under `RETRAIN_SEEDS` fresh seeds that no evaluation of the run used,
and scored on their mean. Each genome is re-trained once per run, whatever budget level
it is the incumbent of; the re-trained curve is that score at each level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks import search_flops, search_stats
from dogma_evolve.evaluation import EvalRequest
from dogma_evolve.evaluation.precision import pool_precision
from dogma_evolve.evaluation.protocol import Pool
from dogma_evolve.evaluation.tasks import derive_seed
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.objectives import quality_of

RETRAIN_SEEDS = 3


def retrain_seeds(seed: int, genome_id: str, used: set[int], k: int = RETRAIN_SEEDS) -> list[int]:
    """`k` training seeds for re-training an incumbent, none of them in `used`."""
    out: list[int] = []
    n = 0
    while len(out) < k:
        s = derive_seed("retrain", seed, genome_id, n)
        n += 1
        if s not in used and s not in out:
            out.append(s)
    return out


def retrain(yaml: str, genome_id: str, config: RunConfig, seeds: list[int], pool: Pool) -> list[float]:
    """Qualities of the genome trained at the full fidelity under `seeds` (0 for a failure)."""
    requests = [
        EvalRequest(
            genome_yaml=yaml,
            genome_id=genome_id,
            task=config.task,
            fidelity=config.steps,
            seed=s,
            timeout_s=config.timeout_s,
            precision=pool_precision(config.precision, pool),
        )
        for s in seeds
    ]
    return [quality_of(r.metrics) if r.status == "ok" else 0.0 for r in pool.evaluate(requests)]


def known_retrains(done: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Re-trainings recorded in a run's side file, by genome id (a file written before the
    curve was re-trained holds only the endpoint's, under "retrained")."""
    known: dict[str, dict[str, Any]] = dict(done.get("retrains", {}))
    end = done.get("retrained")
    if end and end["genome_id"] not in known:
        known[end["genome_id"]] = {"seeds": end["seeds"], "qualities": end["qualities"]}
    return known


def retrain_incumbents(
    run_rows: list[search_flops.Row],
    levels: list[float],
    seed: int,
    used: set[int],
    known: dict[str, dict[str, Any]],
    train: Callable[[search_flops.Row, list[int]], list[float]],
    save: Callable[[], None] = lambda: None,
) -> int:
    """Re-train (`train(row, seeds)`) the incumbent at each FLOP level that `known` does not
    hold yet, under `retrain_seeds` that avoid the search's seeds `used`, into `known` (then
    `save()`); how many were."""
    fresh = 0
    for x in levels:
        best = search_flops.incumbent(run_rows, x)
        if best is not None and best.genome_id not in known:
            seeds = retrain_seeds(seed, best.genome_id, used)
            known[best.genome_id] = {"seeds": seeds, "qualities": train(best, seeds)}
            save()
            fresh += 1
    return fresh


def retrained_curve(
    run_rows: list[search_flops.Row], levels: list[float], known: dict[str, dict[str, Any]]
) -> search_stats.Curve | None:
    """(level, mean re-trained quality of the incumbent within the level) at each level that
    has an incumbent; None while one of them is not re-trained yet."""
    out: search_stats.Curve = []
    for x in levels:
        best = search_flops.incumbent(run_rows, x)
        if best is None:
            continue
        again = known.get(best.genome_id)
        if again is None:
            return None
        out.append((x, sum(again["qualities"]) / len(again["qualities"])))
    return out


__all__ = [
    "RETRAIN_SEEDS",
    "known_retrains",
    "retrain",
    "retrain_incumbents",
    "retrain_seeds",
    "retrained_curve",
]
