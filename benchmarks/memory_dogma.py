"""Memory across runs on the DOGMA space: `--memory-from` vs a cold start, and what the
operator credit adds beyond the inherited elites.

Protocol: for each of `--seeds` seeds, a source run (seed 100 + i) searches the default
suite; then three target runs start from a copy of its store, at equal real evaluations
(`max_evaluations`), each with its own seed and `seed_policy="run"` (no shared noise):

- `cold`: no memory;
- `memory`: `--memory-from` the source run (its operator credit and its elites);
- `elites only`: the source run's elites without its operator credit.

Reported: the best full-fidelity quality each target run reached (mean ± standard error),
and the paired differences memory - cold and memory - elites-only (the credit's share).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/memory_dogma.py
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from dogma_evolve.evaluation.table import InProcessPool  # noqa: E402
from dogma_evolve.evolution.config import RunConfig  # noqa: E402
from dogma_evolve.evolution.engine import Engine  # noqa: E402
from dogma_evolve.evolution.evaluating import quality_of  # noqa: E402
from dogma_evolve.store import Store  # noqa: E402

ARMS = {"cold": None, "memory": ("credit", "elites"), "elites only": ("elites",)}


def run(db: str, settings: dict[str, Any]) -> tuple[str, float]:
    """One run in the store at `db`: its id and best full-fidelity quality."""
    torch.set_num_threads(1)
    with Store(f"sqlite:///{db}") as store:
        engine = Engine(RunConfig(seed_policy="run", **settings), store, InProcessPool())
        engine.run()
    final = [quality_of(c.metrics) for _, c in engine.history if c.record.final]
    return engine.run_id, max(final)


def seed_job(job: tuple[int, dict[str, Any], str]) -> dict[str, Any]:
    """The source run of one seed, then its three target runs on copies of its store."""
    i, settings, root = job
    source_db = f"{root}/source-{i}.db"
    source_id, source_best = run(source_db, {**settings, "seed": 100 + i})
    out: dict[str, Any] = {"seed": i, "source": source_best}
    for arm, parts in ARMS.items():
        db = f"{root}/{arm.replace(' ', '-')}-{i}.db"
        shutil.copy(source_db, db)
        memory = {} if parts is None else {"memory_from": source_id, "memory_parts": parts}
        out[arm] = run(db, {**settings, "seed": 200 + i, **memory})[1]
    return out


def mean_se(xs: list[float]) -> str:
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3f} ± {se:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--population", type=int, default=12)
    parser.add_argument("--evaluations", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    settings = {"population": args.population, "max_evaluations": args.evaluations}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root, ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(seed_job, [(i, settings, root) for i in range(args.seeds)]))
    cfg = RunConfig(**settings)
    print(
        f"memory across runs, task {cfg.task}: {args.seeds} seeds, population {args.population}, "
        f"{args.evaluations} real evaluations per run, {cfg.steps} steps "
        f"(first fidelity {cfg.first_fidelity})"
    )
    print(f"{'arm':<14}{'best quality':>18}")
    for arm in ("source", *ARMS):
        print(f"{arm:<14}{mean_se([r[arm] for r in rows]):>18}")
    for a, b in (("memory", "cold"), ("memory", "elites only"), ("elites only", "cold")):
        print(f"{a} - {b}: {mean_se([r[a] - r[b] for r in rows])} (paired)")
    print(f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
