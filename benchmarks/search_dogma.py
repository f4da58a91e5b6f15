"""Evolution (default nsga2) vs random search on the DOGMA space, at equal evaluations.

Small on purpose so that it finishes in minutes on a 2-core CPU: default task (mqar),
population 8, 2 offspring generations (24 evaluations per run), 30 training steps per
evaluation, 3 seeds per strategy, in-process evaluation (no Ray), one store per run (no
cross-run cache between the compared runs). Reports the best accuracy and the Pareto
hypervolume over (accuracy ↑, parameters ↓), with parameters normalised by the budget
and the reference point (accuracy 0, parameters = budget).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_dogma.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.table import InProcessPool  # noqa: E402
from evolution.engine import Engine, RunConfig  # noqa: E402
from store import Store  # noqa: E402


def hypervolume(points: list[tuple[float, float]], max_params: float) -> float:
    """Area dominated by (accuracy, params) points w.r.t. (0, max_params), params scaled."""
    pts = sorted(((a, p / max_params) for a, p in points if p <= max_params), key=lambda x: x[1])
    area, best_acc = 0.0, 0.0
    for i, (acc, cost) in enumerate(pts):
        best_acc = max(best_acc, acc)
        nxt = pts[i + 1][1] if i + 1 < len(pts) else 1.0
        area += best_acc * (nxt - cost)
    return area


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--generations", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--task", default="mqar")
    parser.add_argument("--max-params", type=int, default=250_000)
    args = parser.parse_args()
    budget = args.population * (args.generations + 1)
    root = Path(tempfile.mkdtemp(prefix="dogma-bench-"))
    start = time.perf_counter()
    rows = []
    for strategy in ("nsga2", "random"):
        best, hv, spent = [], [], []
        for seed in range(args.seeds):
            config = RunConfig(
                population=args.population,
                generations=args.generations,
                steps=args.steps,
                task=args.task,
                seed=seed,
                max_params=args.max_params,
                strategy=strategy,
                max_evaluations=budget,
            )
            with Store(f"sqlite:///{root / f'{strategy}-{seed}.db'}") as store:
                engine = Engine(config, store, InProcessPool())
                engine.run()
            done = [c for _, c in engine.history]
            best.append(max(c.metrics["accuracy"] for c in done))
            hv.append(
                hypervolume([(c.metrics["accuracy"], c.metrics["params"]) for c in done], args.max_params)
            )
            spent.append(engine.spent)
            print(
                f"  {strategy} seed {seed}: best {best[-1]:.3f} hv {hv[-1]:.3f} "
                f"evaluations {engine.spent} ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        rows.append((strategy, best, hv, spent))
    print(
        f"DOGMA {args.task}: {args.seeds} seeds, population {args.population}, "
        f"{args.generations} generations, {args.steps} steps, {budget} evaluations per run"
    )
    print("strategy  best accuracy (mean ± sd)   hypervolume (mean ± sd)   evaluations")
    for name, best, hv, spent in rows:
        sd_b = statistics.stdev(best) if len(best) > 1 else 0.0
        sd_h = statistics.stdev(hv) if len(hv) > 1 else 0.0
        print(
            f"{name:<8}  {statistics.mean(best):.3f} ± {sd_b:.3f}"
            f"               {statistics.mean(hv):.3f} ± {sd_h:.3f}"
            f"             {statistics.mean(spent):.0f}"
        )
    print(f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
