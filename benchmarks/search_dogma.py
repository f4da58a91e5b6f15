"""Evolution vs random search on the DOGMA space, with the hand-designed baselines.

Protocol (every number below comes from this one script):

- **Search runs**: the default strategy (nsga2) and random search, `--seeds` runs each, on
  the default suite at the default training budget, population `--population` for
  `--generations` offspring generations, at **equal real evaluations** (`max_evaluations`:
  both strategies stop at the same count). Each run has its own seed and its own store,
  with `seed_policy="run"`: no run shares a training-noise draw with another (the random
  runs use seeds `1000 + i`, so not even generation 0 is shared).
- **Per run**: the best quality among full-fidelity evaluations, and the hypervolume of
  (quality up, parameters down) over them, parameters divided by the budget, reference
  point (quality 0, parameters = budget), qualities below 0 counted as 0.
- **Baselines**: Llama-style (Transformer++: RoPE, RMSNorm, SwiGLU, GQA), GPT-2-style,
  Mamba and a Jamba-style hybrid, each scaled to the largest width and depth under the
  parameter budget, trained at the same budget with a 3-point learning-rate sweep (0.5x,
  1x, 2x the width rule's rate); the best of the sweep is reported.
- Table: mean ± standard error over runs; the verdict lines state whether the default
  beats random by >= 2 standard errors on both, and whether the best discovered genome
  scores >= the best baseline at <= its parameters.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search_dogma.py
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from evaluation import EvalRequest, evaluate, get_task  # noqa: E402
from evaluation.budget import learning_rate  # noqa: E402
from evaluation.table import InProcessPool  # noqa: E402
from evolution.config import RunConfig  # noqa: E402
from evolution.engine import Engine  # noqa: E402
from evolution.evaluating import quality_of  # noqa: E402
from evolution.spaces.dogma.seeds import scale_down  # noqa: E402
from genome import PRESETS, Genome, GenomeError  # noqa: E402
from phenotype import account  # noqa: E402
from store import Store  # noqa: E402

BASELINES = {
    "llama (Transformer++)": "llama3-8b",
    "gpt2": "gpt2-small",
    "mamba": "mamba-130m",
    "jamba": "jamba",
}
LR_SWEEP = (0.5, 1.0, 2.0)


def hypervolume(points: list[tuple[float, float]], max_params: float) -> float:
    """Area dominated by (quality, params) points w.r.t. (0, max_params), params scaled."""
    pts = sorted(((max(q, 0.0), p / max_params) for q, p in points if p <= max_params), key=lambda x: x[1])
    area, best = 0.0, 0.0
    for i, (q, cost) in enumerate(pts):
        best = max(best, q)
        nxt = pts[i + 1][1] if i + 1 < len(pts) else 1.0
        area += best * (nxt - cost)
    return area


def search_run(job: tuple[str, int, dict[str, Any]]) -> dict[str, Any]:
    """One search run in its own store; its best genome and scores."""
    strategy, seed, settings = job
    torch.set_num_threads(1)
    config = RunConfig(strategy=strategy, seed=seed, seed_policy="run", **settings)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, Store(f"sqlite:///{tmp}/run.db") as store:
        engine = Engine(config, store, InProcessPool())
        engine.run()
    final = [c for _, c in engine.history if c.record.final]
    best = max(final, key=lambda c: quality_of(c.metrics))
    return {
        "strategy": strategy,
        "seed": seed,
        "best": quality_of(best.metrics),
        "best_params": int(best.metrics["params"]),
        "best_sequence": best.genome.sequence_view(),
        "hv": hypervolume([(quality_of(c.metrics), c.metrics["params"]) for c in final], config.max_params),
        "evaluations": engine.spent,
        "seconds": time.perf_counter() - start,
    }


def baseline_genome(preset: str, max_params: int, pinned: dict[str, Any]) -> Genome:
    """The preset's architecture at the largest width and depth under `max_params`."""
    best: tuple[int, Genome] | None = None
    for width in range(32, 257, 16):
        for copies in range(1, 9):
            try:
                genome = Genome.from_dict(scale_down(PRESETS[preset](), width, copies, pinned))
            except GenomeError:
                continue
            params = account(genome).params
            if params <= max_params and (best is None or params > best[0]):
                best = (params, genome)
    if best is None:
        raise ValueError(f"no {preset} under {max_params} parameters")
    return best[1]


def baseline_run(job: tuple[str, str, float, dict[str, Any]]) -> dict[str, Any]:
    name, preset, scale, settings = job
    torch.set_num_threads(1)
    config = RunConfig(**settings)
    task = get_task(config.task)
    genome = baseline_genome(preset, config.max_params, {"vocab": task.vocab_size, "max_len": task.seq_len})
    width = int(genome.to_dict()["regions"][0]["settings"]["d_model"])
    lr = scale * learning_rate(width)
    request = EvalRequest(genome.to_yaml(), genome.id, config.task, config.steps, seed=0)
    result = evaluate(request, train_options={"lr": lr})
    return {
        "name": name,
        "scale": scale,
        "lr": lr,
        "params": account(genome).params,
        "quality": quality_of(result.metrics) if result.status == "ok" else float("nan"),
        "status": result.status,
        "sequence": genome.sequence_view(),
    }


def mean_se(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--generations", type=int, default=3)
    parser.add_argument("--surrogate", type=int, default=RunConfig().surrogate)
    parser.add_argument("--max-params", type=int, default=RunConfig().max_params)
    parser.add_argument("--steps", type=int, default=RunConfig().steps, help="full training budget")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    settings: dict[str, Any] = {
        "population": args.population,
        "max_params": args.max_params,
        "steps": args.steps,
    }
    cfg = RunConfig(**settings)
    children = cfg.children
    # the default strategy's evaluation count with these settings sets the shared budget:
    # every child is trained at the first fidelity, a quarter again at the full one
    promoted = 0
    if cfg.first_fidelity is not None:
        promoted = math.ceil(cfg.promote * args.population) + args.generations * math.ceil(
            cfg.promote * children
        )
    budget = args.population + args.generations * children + promoted
    settings.update(max_evaluations=budget, surrogate=args.surrogate)
    start = time.perf_counter()
    jobs = [("nsga2", s, settings) for s in range(args.seeds)]
    jobs += [("random", 1000 + s, settings) for s in range(args.seeds)]
    base_jobs = [
        (name, preset, scale, {"max_params": args.max_params, "steps": args.steps})
        for name, preset in BASELINES.items()
        for scale in LR_SWEEP
    ]
    with ProcessPoolExecutor(args.workers) as pool:
        runs = list(pool.map(search_run, jobs))
        baselines = list(pool.map(baseline_run, base_jobs))
    cfg = RunConfig(**settings)
    print(
        f"DOGMA search, task {cfg.task}: {args.seeds} runs per strategy, population {args.population}, "
        f"{children} children x {args.generations} generations, {cfg.steps} steps (first fidelity "
        f"{cfg.first_fidelity}), {budget} real evaluations per run, budget {args.max_params:,} parameters"
    )
    print(f"{'strategy':<10}{'best quality':>22}{'hypervolume':>22}{'evaluations':>13}")
    stats = {}
    for strategy in ("nsga2", "random"):
        rows = [r for r in runs if r["strategy"] == strategy]
        b, h = mean_se([r["best"] for r in rows]), mean_se([r["hv"] for r in rows])
        stats[strategy] = (b, h)
        spent = statistics.mean(r["evaluations"] for r in rows)
        print(f"{strategy:<10}{b[0]:>14.3f} ± {b[1]:.3f}{h[0]:>14.3f} ± {h[1]:.3f}{spent:>13.0f}")
    print("\nbaselines (best of the 3-point learning-rate sweep, same budget):")
    print(f"{'baseline':<24}{'params':>10}{'quality':>10}{'lr':>10}  sweep (0.5x, 1x, 2x)")
    best_base: dict[str, dict[str, Any]] = {}
    for name in BASELINES:
        rows = [b for b in baselines if b["name"] == name]
        ok = [b for b in rows if not math.isnan(b["quality"])]
        top = max(ok, key=lambda b: b["quality"]) if ok else rows[0]
        best_base[name] = top
        sweep = ", ".join(f"{b['quality']:.3f}" for b in rows)
        print(f"{name:<24}{top['params']:>10,}{top['quality']:>10.3f}{top['lr']:>10.4f}  {sweep}")
    found = max((r for r in runs if r["strategy"] == "nsga2"), key=lambda r: r["best"])
    print(
        f"\nbest discovered: quality {found['best']:.3f} at {found['best_params']:,} params: "
        f"{found['best_sequence']}"
    )
    (nb, nh), (rb, rh) = stats["nsga2"], stats["random"]
    gap_b, se_b = nb[0] - rb[0], math.hypot(nb[1], rb[1])
    gap_h, se_h = nh[0] - rh[0], math.hypot(nh[1], rh[1])
    print(
        f"nsga2 - random: best quality {gap_b:+.3f} ({gap_b / se_b if se_b else float('inf'):+.1f} SE), "
        f"hypervolume {gap_h:+.3f} ({gap_h / se_h if se_h else float('inf'):+.1f} SE); "
        f"target >= 2 SE on both: {'met' if gap_b >= 2 * se_b and gap_h >= 2 * se_h else 'missed'}"
    )
    beaten = [
        n
        for n, b in best_base.items()
        if b["params"] >= found["best_params"] and found["best"] >= b["quality"]
    ]
    larger = [n for n, b in best_base.items() if b["params"] >= found["best_params"]]
    strongest = max(best_base.values(), key=lambda b: b["quality"])
    met = found["best"] >= strongest["quality"] and found["best_params"] <= strongest["params"]
    print(
        f"best baseline: {strongest['name']} {strongest['quality']:.3f} at {strongest['params']:,} params; "
        f"the discovered genome scores >= {len(beaten)} of the {len(larger)} baselines at >= its parameters; "
        f"target (>= the best baseline at <= its parameters): "
        f"{'met' if met else 'missed'}"
    )
    print(f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
