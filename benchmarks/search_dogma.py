"""Search strategies on the DOGMA space at equal training FLOPs, paired, with baselines.

Protocol (every number the table prints comes from this one script):

- **Budget in training FLOPs**, not evaluations: a run is driven one generation at a time
  (`Engine.resume(run_id, store, pool, generations=g)`) and stops once its summed training
  FLOPs (`benchmarks.search_flops.run_flops`: `compute_totals`, the project's own sum of
  `metrics["train_flops"]` over real evaluations) reach `--budget-flops`. By default that
  is `--budget-evals` (24) full trainings of the average generation-0 genome of seed 0
  (priced by the accountant, nothing trained). A run is scored only on what it trained
  within the budget (`search_flops.incumbent`): the overshoot of its last generation
  counts for nothing.
- **Arms**: `default` (`RunConfig()`'s strategy and settings as they are when this runs;
  the first fidelity scaled with `--steps`: min_steps x steps / RunConfig().steps),
  `random` (strategy random, single fidelity), `sha` (random sampling + the engine's
  successive halving: every child at the first fidelity, the best `promote` fraction
  in full, i.e. one synchronous 2-rung bracket with eta = 1/promote), `aging` and `local`
  (only when registered in `evolution.strategies.STRATEGIES`; skipped ones are printed),
  `nsga2` (the previous default: NSGA-II's loop on quality, no surrogate), `single` (the
  default at a single fidelity: every trained child in full), `by-quality` (the default
  with its first stage promoted by quality, as before `promote_by`), `screen` (the default
  promoting half as many), `no-surrogate` (`surrogate` 1: the default since
  `default_surrogate` turns the forest off with a first stage), `surrogate` (the default
  before that: `surrogate` 10), `incumbent`
  (the default with `parents` 1; the default itself since `default_parents`),
  `three-parents` (the default before that: `parents` 3),
  `optuna` (its default TPE sampler over a define-by-run parametrisation of the space,
  `benchmarks.optuna_dogma`, trained through the same pool and stored in the same kind
  of store). Full Hyperband/ASHA is not offered: the engine has one first fidelity and
  one full one, and trains a generation synchronously, so several brackets with different
  minimum budgets, or asynchronous promotion, do not exist to drive.
- **Pairing**: run s of every engine arm has run seed s, so arms that share the first
  fidelity share generation 0 (`Engine._seeds` draws it from the run seed: same genomes,
  and with `seed_policy="run"` the same training seeds); Optuna's trial s uses seed s
  too and is compared run for run. Paired differences over the seeds both arms finished:
  mean ± SE, paired t-test, sign-flip permutation test (`benchmarks.search_stats`).
- **Incumbent scored fairly**: a run's incumbent (best full-fidelity quality within the
  budget) is trained again under 3 fresh seeds (`derive_seed("retrain", seed, genome, k)`,
  checked against every seed the run used) at the full fidelity; its score is their
  mean. The search's own observation is shown beside it (the winner's curse).
- **Curves**: best-so-far quality against cumulative training FLOPs, twice: as observed
  (every full result, `--points` levels) and re-trained (the incumbent within each of
  `--retrain-points` evenly spaced budgets, the last the budget itself, re-trained as
  above; `benchmarks.search_retrain`, each genome once per run).
- **Baselines**: Llama-style, GPT-2-style, Mamba and Jamba-style, each at the largest width
  and depth under the parameter budget, a 3-point learning-rate sweep (0.5x, 1x, 2x the
  width rule) on the sweep seed, the sweep's best re-trained under 3 fresh seeds; one with
  no size under the budget is left out with a printed line (Jamba-style: 824k parameters
  at width 32 and one copy, over the 250k budget, as the genome code stands now).
- **Seeds**: reported runs use seeds 0..n-1; `--tune` uses 1000.. (its own folder), where
  settings (`--population`, `--steps`, ...) are chosen before any report seed is run;
  `--first-seed K` runs seeds K..K+n-1 instead (a replication on fresh seeds, reported
  alone: its own `--out`, so the table never mixes two seed sets).
- **Resumable**: one SQLite store per (arm, seed) under `--out`; a finished run is
  skipped, an interrupted one resumed; re-trainings and baselines are kept in JSON files
  there; the table is recomputed from the stores on every invocation.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_dogma.py --out runs/search_dogma
    .venv/bin/python benchmarks/search_dogma.py --seeds 1 --arms default,random \
        --budget-evals 3 --steps 20 --no-baselines --out /tmp/smoke     # a smoke

Sizing (2 cores, measured on single evaluations, load average ~2): the 8 generation-0
genomes of seed 0 take 7.1 s each on average at 100 steps and 1.85 s at 20 (one core;
time is about proportional to steps, recurrent kinds are slow per FLOP). At 24
evaluation-equivalents a single-fidelity run then costs ~200 s, a multi-fidelity one
~215 s (8.1 s per equivalent: the first stage costs more per FLOP), both with their
overshooting last generation. The defaults (`--steps 90`, first fidelity 18;
`--budget-evals 24`; 10 seeds x default, random, optuna + 5 seeds x sha, aging, local;
3 re-trainings per run; 3 baselines x 6 trainings) come to ~9,800 core-seconds, about
82 minutes on 2 workers. An estimate: the full benchmark has not been run. Measured at
the default run's fidelity (`--steps 300 --seeds 5 --arms default,random,optuna,by-quality
--no-baselines`): about 10 minutes a seed for default, random and optuna on 2 workers
(2,907 s for 5 seeds, the default then promoting by quality), 820 s for the 5 runs of
`default` alone; 4,807 s for 10 seeds of default, random and optuna (docs/results.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks import search_flops, search_stats  # noqa: E402
from benchmarks.optuna_dogma import version_mismatch  # noqa: E402
from benchmarks.search_baselines import BASELINES, run_baselines  # noqa: E402
from benchmarks.search_retrain import (  # noqa: E402
    known_retrains,
    retrain,
    retrain_incumbents,
    retrain_seeds,
    retrained_curve,
)
from dogma_evolve.evaluation.budget import training_flops  # noqa: E402
from dogma_evolve.evaluation.protocol import Pool  # noqa: E402
from dogma_evolve.evaluation.table import InProcessPool  # noqa: E402
from dogma_evolve.evaluation.tasks import derive_seed, get_task  # noqa: E402
from dogma_evolve.evolution.config import RunConfig  # noqa: E402
from dogma_evolve.evolution.engine import Engine  # noqa: E402
from dogma_evolve.evolution.spaces.registry import SPACES  # noqa: E402
from dogma_evolve.evolution.strategies import STRATEGIES, make_strategy  # noqa: E402
from dogma_evolve.store import Store  # noqa: E402

MAIN_ARMS = ("default", "random", "optuna")  # >= 10 seeds by default
ALL_ARMS = (
    "default",
    "random",
    "optuna",
    "sha",
    "aging",
    "local",
    "nsga2",
    "single",
    "by-quality",
    "screen",
    "no-surrogate",
    "surrogate",
    "incumbent",
    "three-parents",
)
TUNE_SEED0 = 1000
BREEDING_ONLY = ("surrogate", "explore", "parents", "sample_size")  # settings of bred children
SURROGATE_ONLY = ("explore", "explore_pool")  # settings a run without a surrogate never reads
STALL = 5  # generations in a row that trained nothing: the run is over


def arm_overrides(arm: str, steps: int) -> dict[str, Any] | None:
    """The RunConfig settings of an engine arm beyond the shared ones; None when the arm
    is not an engine arm or its strategy is not registered."""
    d = RunConfig()
    first = round(d.min_steps * steps / d.steps) if d.min_steps else d.min_steps
    if arm == "default":
        return {"min_steps": first}
    if arm == "random":
        return {"strategy": "random", "min_steps": 0}
    if arm == "sha":
        return {"strategy": "random", "min_steps": first}
    if arm in ("aging", "local") and arm in STRATEGIES:
        return {"strategy": arm, "min_steps": first}
    if arm == "nsga2":  # the default before issue 20's benchmark chose local search + surrogate
        return {"strategy": "nsga2", "surrogate": 1, "min_steps": first}
    if arm == "single":  # the default's loop without the first stage
        return {"min_steps": 0}
    if arm == "by-quality":  # the default before its first stage promoted by held-out loss
        return {"min_steps": first, "promote_by": "quality"}
    if arm == "screen":  # the default promoting half as many: more screened per full training
        return {"min_steps": first, "promote": d.promote / 2}
    if arm == "no-surrogate":  # the bred children as drawn (the default since `default_surrogate`
        return {"min_steps": first, "surrogate": 1}  # weighs the first stage)
    if arm == "surrogate":  # the default before that: 10 bred a trained child, the forest picks
        return {"min_steps": first, "surrogate": 10}
    if arm == "incumbent":  # the default breeding around the incumbent alone (`--parents 1`)
        return {"min_steps": first, "parents": 1}
    if arm == "three-parents":  # the default before `default_parents`: around the best three
        return {"min_steps": first, "parents": 3}
    return None


def available(arms: list[str]) -> tuple[list[str], list[str]]:
    """(arms to run, arms skipped because their strategy is not registered)."""
    run = [a for a in arms if a == "optuna" or arm_overrides(a, 100) is not None]
    return run, [a for a in arms if a not in run]


def arm_config(arm: str, seed: int, shared: dict[str, Any]) -> RunConfig:
    """The run's configuration: shared settings, then the arm's own, seed_policy run
    (optuna's: single fidelity, the one its trials train at and its store records)."""
    own = arm_overrides("random" if arm == "optuna" else arm, shared["steps"]) or {}
    return RunConfig(**{**shared, **own, "seed": seed, "seed_policy": "run"})


def reference_flops(shared: dict[str, Any]) -> float:
    """Training FLOPs of the average generation-0 genome of seed 0 at the full fidelity
    (the accountant's flops_per_token; nothing trained)."""
    config = RunConfig(**shared)
    space = SPACES[config.space].from_config(config)
    task = get_task(config.task)
    first = config.initial_population or config.population
    genomes = space.initial(first, random.Random(derive_seed(0, "generation", 0)))
    costs = [
        training_flops(
            space.cost_metrics(g)["flops_per_token"], config.steps, task.train_batch_size, task.seq_len
        )
        for g in genomes
    ]
    return sum(costs) / len(costs)


def drive_engine(config: RunConfig, store: Store, pool: Pool, budget: float) -> str:
    """Run (or resume) the store's one search run a generation at a time until its
    training FLOPs reach `budget`; the run id."""
    runs = store.list_runs("search")
    run_id = runs[0].id if runs else store.create_run(config.to_dict(), config.seed, config.task)
    stalled, spent = 0, search_flops.run_flops(store, run_id, config)
    while spent < budget and stalled < STALL:
        record = store.get_run(run_id)
        assert record is not None
        Engine.resume(run_id, store, pool, generations=record.last_generation + 1).run()
        now = search_flops.run_flops(store, run_id, config)
        stalled = stalled + 1 if now == spent else 0
        spent = now
    store.set_run_status(run_id, "finished", f"training-FLOP budget {budget:.4g} reached")
    return run_id


def paths(out: Path, arm: str, seed: int) -> tuple[Path, Path]:
    return out / f"{arm}-seed{seed}.db", out / f"{arm}-seed{seed}.json"


class StoredRunMismatch(ValueError):
    """A stored run under `--out` was made with settings other than its arm's now."""


def check_settings(store: Store, run_id: str, config: RunConfig, side: Path) -> None:
    """Refuse a stored run whose settings differ from the arm's now (a default changed since
    it ran): its result would be reported under the wrong arm. Settings only one side knows
    (added or retired since) are not compared."""
    record = store.get_run(run_id)
    stored = record.config if record is not None else {}
    now = config.to_dict()
    fresh = make_strategy(config.strategy, config.sample_size, config.quality_floor, config.parents)
    moot = () if fresh.breeds else BREEDING_ONLY  # a strategy that breeds nothing never uses them
    if config.surrogate == 1 and stored.get("surrogate") == 1:
        moot = (*moot, *SURROGATE_ONLY)  # no surrogate: nothing chooses an exploration share
    differ = sorted(k for k in stored.keys() & now.keys() - set(moot) if stored[k] != now[k])
    if differ:
        shown = ", ".join(f"{k} {stored[k]!r} -> {now[k]!r}" for k in differ)
        raise StoredRunMismatch(
            f"{side.with_suffix('.db')} holds a run of other settings ({shown}): move it away"
        )
    if why := version_mismatch(stored):  # an Optuna run: the same Optuna, or its result is another's
        raise StoredRunMismatch(f"{side.with_suffix('.db')}: its run {why}")


def run_one(job: tuple[str, int, dict[str, Any], float, str, int]) -> dict[str, Any]:
    """One (arm, seed): search to the budget (skipped when finished), then its incumbents at
    `points` FLOP levels (the last is the budget) re-trained under fresh seeds (each genome
    once: skipped when already done)."""
    arm, seed, shared, budget, out_dir, points = job
    torch.set_num_threads(1)
    db, side = paths(Path(out_dir), arm, seed)
    done = json.loads(side.read_text()) if side.exists() else {}
    if done and done.get("shared") != shared:
        raise StoredRunMismatch(
            f"{side} holds a run with other settings ({done.get('shared')}): use another --out"
        )
    config = arm_config(arm, seed, shared)
    pool = InProcessPool()
    start = time.perf_counter()
    with Store(f"sqlite:///{db}") as store:
        if done.get("run_id"):
            check_settings(store, done["run_id"], config, side)
        if not (done.get("budget") == budget and done.get("searched")):
            runs = store.list_runs("search")
            if arm == "optuna":
                from benchmarks.optuna_dogma import run_optuna

                run_id = run_optuna(store, config, pool, budget, run_id=runs[0].id if runs else None)
            else:
                run_id = drive_engine(config, store, pool, budget)
            done = {"arm": arm, "seed": seed, "shared": shared, "budget": budget, "searched": True}
            done["run_id"] = run_id
            side.write_text(json.dumps(done, indent=1))
        run_id = done["run_id"]
        run_rows = search_flops.rows(store, run_id, config)
        used = search_flops.search_seeds(store, run_id)
        known = done["retrains"] = known_retrains(done)

        def train(row: search_flops.Row, seeds: list[int]) -> list[float]:
            return retrain(row.yaml, row.genome_id, config, seeds, pool)

        def save() -> None:  # each re-training kept as it lands
            side.write_text(json.dumps(done, indent=1))

        levels = search_stats.grid(budget, points)
        retrain_incumbents(run_rows, levels, seed, used, known, train, save)
        best = search_flops.incumbent(run_rows, budget)
        if best is not None and done.get("retrained", {}).get("genome_id") != best.genome_id:
            done["retrained"] = {"genome_id": best.genome_id, **known[best.genome_id]}
            side.write_text(json.dumps(done, indent=1))
    done["wall_s"] = time.perf_counter() - start
    return done


def collect(
    out: Path, arm: str, seed: int, shared: dict[str, Any], budget: float, points: int
) -> dict[str, Any] | None:
    """A finished run's numbers recomputed from its store (and its re-trainings); None until
    it is searched and its incumbents at the `points` FLOP levels are re-trained."""
    db, side = paths(out, arm, seed)
    if not (db.exists() and side.exists()):
        return None
    done = json.loads(side.read_text())
    if not done.get("searched") or done.get("budget") != budget or done.get("shared") != shared:
        return None
    config = arm_config(arm, seed, shared)
    with Store(f"sqlite:///{db}") as store:
        rows = search_flops.rows(store, done["run_id"], config)
        spent = search_flops.run_flops(store, done["run_id"], config)
    best = search_flops.incumbent(rows, budget)
    again = done.get("retrained", {})
    retrained = retrained_curve(rows, search_stats.grid(budget, points), known_retrains(done))
    if retrained is None:
        return None  # not re-trained yet
    common = {
        "arm": arm,
        "seed": seed,
        "curve": search_flops.curve(rows),
        "retrained_curve": retrained,
        "flops": spent,
        "full_evaluations": sum(r.quality is not None for r in rows if r.cumulative <= budget),
    }
    if best is None:  # nothing trained in full within the budget: it found nothing
        return {**common, "observed": 0.0, "score": 0.0, "params": 0, "genome_id": None, "no_result": True}
    if again.get("genome_id") != best.genome_id:
        return None  # not re-trained yet
    return {
        **common,
        "observed": best.quality,
        "score": sum(again["qualities"]) / len(again["qualities"]),
        "retrain_seeds": again["seeds"],
        "params": best.params,
        "genome_id": best.genome_id,
        "yaml": best.yaml,
        "no_result": False,
    }


def print_curves(
    title: str, levels: list[float], curves: dict[str, list[tuple[float, float, float, int]]]
) -> None:
    """One curve table: a row per FLOP level, mean (runs with a value) per arm."""
    print(f"\n{title}")
    print(f"{'FLOPs':>10}" + "".join(f"{a:>16}" for a in curves))
    for i, x in enumerate(levels):
        cells = "".join(
            f"{c[i][1]:>10.4f} ({c[i][3]:>2})" if c[i][3] else f"{'-':>16}" for c in curves.values()
        )
        print(f"{x:>10.3g}{cells}")


def report(
    results: dict[str, list[dict[str, Any]]], budget: float, points: int, retrain_points: int, out: Path
) -> dict[str, Any]:
    """Print the tables and verdicts; write curves (JSON, CSV) and the summary beside them."""
    arms = [a for a in results if results[a]]
    print(
        f"{'arm':<9}{'runs':>5}{'incumbent, 3 fresh seeds':>27}{'as observed':>19}"
        f"{'full evals':>11}{'FLOPs':>10}"
    )
    summary: dict[str, Any] = {"budget_flops": budget, "arms": {}}
    if "optuna" in arms:
        import optuna

        print(f"(optuna: Optuna {optuna.__version__}'s default sampler)")
        summary["optuna_version"] = optuna.__version__
    for arm in arms:
        rs = results[arm]
        s, o = (
            search_stats.mean_se([r["score"] for r in rs]),
            search_stats.mean_se([r["observed"] for r in rs]),
        )
        evals = sum(r["full_evaluations"] for r in rs) / len(rs)
        flops = sum(r["flops"] for r in rs) / len(rs)
        print(
            f"{arm:<9}{len(rs):>5}{s[0]:>19.4f} ± {s[1]:.4f}{o[0]:>11.4f} ± {o[1]:.4f}"
            f"{evals:>11.1f}{flops:>10.3g}"
        )
        summary["arms"][arm] = {"runs": len(rs), "score": s, "observed": o, "full_evaluations": evals}
        empty = [r["seed"] for r in rs if r["no_result"]]
        if empty:
            print(f"{'':<9}  seeds {empty}: no full-fidelity result within the budget, scored 0")
    levels = search_stats.grid(budget, points)
    curves = {a: search_stats.mean_curve([r["curve"] for r in results[a]], levels) for a in arms}
    print_curves(
        "best-so-far full-fidelity quality (as observed) vs cumulative training FLOPs, mean over runs:",
        levels,
        curves,
    )
    again_levels = search_stats.grid(budget, retrain_points)
    again = {
        a: search_stats.mean_curve([r["retrained_curve"] for r in results[a]], again_levels) for a in arms
    }
    print_curves(
        "the incumbent within each budget re-trained under 3 fresh seeds vs cumulative training FLOPs, "
        "mean over runs:",
        again_levels,
        again,
    )
    with (out / "curves.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["curve", "arm", "flops", "mean_best_quality", "se", "runs"])
        for kind, table in (("observed", curves), ("retrained", again)):
            for a in arms:
                w.writerows([kind, a, *row] for row in table[a])
    (out / "curves.json").write_text(
        json.dumps(
            {
                a: {
                    "levels": levels,
                    "curve": curves[a],
                    "runs": [r["curve"] for r in results[a]],
                    "retrained_levels": again_levels,
                    "retrained_curve": again[a],
                    "retrained_runs": [r["retrained_curve"] for r in results[a]],
                }
                for a in arms
            }
        )
    )
    print()
    summary["paired"] = {}
    if "default" in arms:
        by_seed = {r["seed"]: r["score"] for r in results["default"]}
        for other in (a for a in arms if a != "default"):
            theirs = {r["seed"]: r["score"] for r in results[other]}
            common = sorted(set(by_seed) & set(theirs))
            if not common:
                continue
            p = search_stats.paired([by_seed[s] for s in common], [theirs[s] for s in common])
            print(p.line("default", other) + ("  [target]" if other in ("random", "optuna") else ""))
            summary["paired"][other] = p.__dict__
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def baseline_verdict(results: dict[str, list[dict[str, Any]]], baselines: list[dict[str, Any]]) -> None:
    """Print the baselines and whether default's best beats the best at <= its parameters."""
    print(f"\n{'baseline':<24}{'params':>10}{'3 fresh seeds':>15}{'lr':>9}  sweep (0.5x, 1x, 2x), sweep seed")
    for b in baselines:
        sweep = ", ".join(f"{q:.3f}" for q in b["sweep"])
        print(f"{b['name']:<24}{b['params']:>10,}{b['score']:>15.4f}{b['lr']:>9.4f}  {sweep}")
    if not results.get("default") or not baselines:
        return
    found = max(results["default"], key=lambda r: (not r["no_result"], r["score"]))
    if found["no_result"]:
        print("default found nothing within the budget: no baseline verdict")
        return
    strongest = max(baselines, key=lambda b: b["score"])
    met = found["score"] >= strongest["score"] and found["params"] <= strongest["params"]
    print(
        f"default's best: {found['score']:.4f} (3 fresh seeds) at {found['params']:,} params (seed "
        f"{found['seed']}); best baseline {strongest['name']} {strongest['score']:.4f} at "
        f"{strongest['params']:,}; target (>= the best baseline at <= its parameters): "
        f"{'met' if met else 'missed'}"
    )


def main() -> None:
    d = RunConfig()
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="runs of default, random, optuna (10)")
    parser.add_argument(
        "--other-seeds", type=int, default=None, help="runs of the other arms (min(5, --seeds))"
    )
    parser.add_argument("--arms", default=",".join(ALL_ARMS))
    parser.add_argument("--budget-flops", type=float, default=None)
    parser.add_argument("--budget-evals", type=float, default=24.0, help="budget in average gen-0 trainings")
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--steps", type=int, default=90, help="full fidelity")
    parser.add_argument("--max-params", type=int, default=d.max_params)
    parser.add_argument("--task", default=d.task)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--points", type=int, default=8, help="FLOP levels of the as-observed curve")
    parser.add_argument(
        "--retrain-points", type=int, default=4, help="FLOP levels whose incumbent is re-trained (4)"
    )
    parser.add_argument("--tune", action="store_true", help=f"seeds {TUNE_SEED0}.. in OUT/tune")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=None,
        help=f"the runs' first seed (0; {TUNE_SEED0} with --tune): a replication on fresh seeds",
    )
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("runs/search_dogma"))
    args = parser.parse_args()
    shared = {
        "population": args.population,
        "steps": args.steps,
        "max_params": args.max_params,
        "task": args.task,
    }
    out = args.out / "tune" if args.tune else args.out
    out.mkdir(parents=True, exist_ok=True)
    budget = args.budget_flops or round(args.budget_evals * reference_flops(shared))
    arms, skipped = available([a.strip() for a in args.arms.split(",") if a.strip()])
    unknown = [a for a in skipped if a not in ALL_ARMS]
    if unknown:
        parser.error(f"unknown arms {unknown}; known: {', '.join(ALL_ARMS)}")
    other = args.other_seeds if args.other_seeds is not None else min(5, args.seeds)
    seed0 = args.first_seed if args.first_seed is not None else (TUNE_SEED0 if args.tune else 0)
    if seed0 < 0:
        parser.error(f"--first-seed must be 0 or more, got {seed0}")
    seeds = {a: list(range(seed0, seed0 + (args.seeds if a in MAIN_ARMS else other))) for a in arms}
    # seeds outermost: a benchmark cut short (and resumed later) stays paired
    jobs = [
        (a, s, shared, float(budget), str(out), args.retrain_points)
        for s in sorted({s for a in arms for s in seeds[a]})
        for a in arms
        if s in seeds[a]
    ]
    start = time.perf_counter()
    baselines: list[dict[str, Any]] = []
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(run_one, j) for j in jobs]
        if not args.no_baselines:
            baselines = run_baselines(pool, shared, out / "baselines.json")
        refused = []
        for f in futures:
            try:
                f.result()
            except StoredRunMismatch as e:  # the other runs go on; said in one line at the end
                refused.append(str(e))
    results = {
        a: [
            r for r in (collect(out, a, s, shared, float(budget), args.retrain_points) for s in seeds[a]) if r
        ]
        for a in arms
    }
    missing = {a: len(seeds[a]) - len(results[a]) for a in arms if len(results[a]) < len(seeds[a])}
    print(
        f"DOGMA search, task {args.task}, {'TUNE seeds' if args.tune else 'seeds'} from {seed0}: budget "
        f"{budget:.4g} training FLOPs per run ({args.budget_evals:g} average gen-0 trainings unless given), "
        f"population {args.population}, {args.steps} steps, max {args.max_params:,} params; RunConfig() "
        f"default strategy {d.strategy} (min_steps {d.min_steps} of {d.steps}, promote {d.promote})"
    )
    if skipped:
        print(f"skipped (strategy not registered): {', '.join(skipped)}")
    if missing:
        print(f"runs not finished (rerun to resume): {missing}")
    report(results, float(budget), args.points, args.retrain_points, out)
    baseline_verdict(results, baselines)
    print(f"wall {time.perf_counter() - start:.0f} s; stores, curves.csv/json, summary.json in {out}")
    for line in refused:
        print(f"error: {line}", file=sys.stderr)
    if refused:
        sys.exit(1)


if __name__ == "__main__":
    main()


__all__ = ["BASELINES", "arm_config", "drive_engine", "reference_flops", "retrain_seeds", "run_one"]
