"""Scaling laws of four designs on real English text: does the best genome hold up at larger sizes?

Protocol (every number comes from this one script):

- **Designs**: a Llama-style transformer (``preset:llama3-8b``: RoPE, RMSNorm, SwiGLU,
  GQA), Mamba (``preset:mamba-130m``), the ``dogma`` preset's architecture, and the best
  genome of a default run (``benchmarks/genomes/default_run_best.yaml``: the winner of
  ``evolve run --population 64``, individual 100, quality 0.617 on the suite; its file says
  where it came from). Each is resized along width and depth together
  (``evolution.scale.ladder``, the rule ``evolve scale`` uses; learning rate by the width rule
  ``evaluation.budget.learning_rate``), with the task's vocabulary (257 bytes) and context.
- **Ladder**: by default each design's compact ladder (``evolution.scale.search_ladder.compact_sizes``:
  its smallest valid model, the first model at least 10^1.5 times larger, and the two
  nearest the log-even sizes between: 4 sizes over >= 1.5 decades); ``--sizes`` gives all
  designs the same targets instead (how a cluster run sets 10M..1B), ``--sizes NAME=SIZES``
  one design its own (repeatable; it wins over an unnamed ``--sizes`` for that design), e.g.
  more sizes for a design whose α interval is wide.
- **Sizes** are non-embedding parameters (Kaplan et al. 2020; the totals are in the JSON).
- **Training**: every size ``--seeds`` times (replicate k's seed is ``evolve scale``'s, so the
  seeds differ by design and size: no two points share a noise draw) on ``--task`` (default
  ``bytelm_en``: the King James Bible and Wikipedia articles, 6.0M training bytes, held out by
  document, `evaluation.tasks.corpus`) for ``--tokens-per-param r`` (default 20, D = r·N: a
  scaling law, each size within 4 passes over the text, `evolution.scale.regime`) or a fixed
  ``--tokens D`` for every size (a fixed-data comparison: which design learns most from D
  tokens, printed as not a scaling law). All points go through one Ray pool and one store: a
  killed benchmark resumes without retraining.
- **Fit**: ``L(N) = E + A·N^(−α)`` per design, least squares with residual-bootstrap 95 %
  intervals (``evaluation.scaling``). **β against the transformer** (``compare``, B = the
  design, A = Llama): ``k`` is the factor by which B needs more than A to reach A's loss at
  the geometric middle of the sizes both cover: more parameters at the same data with a fixed
  ``--tokens``; more data and parameters together on a ``--tokens-per-param`` rule. The table
  prints **β = 1/k** in the chapter's sense (Proposition 15.2: ``L_B(D) ≤ L_A(β·D)``; β > 1:
  the design does better than the transformer at equal budget), with its range over the
  shared sizes, and the loss gap there with its bootstrap interval.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/scaling.py --estimate   # price it first
    .venv/bin/python benchmarks/scaling.py --estimate --sizes 10M,30M,100M,300M,1B --tokens-per-param 20
    .venv/bin/python benchmarks/scaling.py --sizes 10M,30M,100M,300M,1B --tokens-per-param 20 \\
        --ray-address HEAD:6379 --store postgresql://...       # a GPU cluster
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dogma_evolve.evaluation.scaling import LadderError  # noqa: E402
from dogma_evolve.evaluation.tasks import get_task  # noqa: E402
from dogma_evolve.evolution.cli.scale import counts  # noqa: E402
from dogma_evolve.evolution.scale.defaults import DEFAULT_TASK, DEFAULT_TOKENS_PER_PARAM  # noqa: E402
from dogma_evolve.evolution.scale.ladder import Design  # noqa: E402
from dogma_evolve.evolution.scale.search_ladder import compact_sizes  # noqa: E402
from dogma_evolve.evolution.scale.train import (  # noqa: E402
    Budget,
    Plan,
    Recorder,
    comparison_dict,
    ladder_pool,
    make_plan,
    plan_summary,
    train_recorded,
)
from dogma_evolve.genome import load_genome  # noqa: E402
from dogma_evolve.phenotype import account  # noqa: E402
from dogma_evolve.store import Store  # noqa: E402

HERE = Path(__file__).resolve().parent
DESIGNS = {
    "llama": "preset:llama3-8b",
    "mamba": "preset:mamba-130m",
    "dogma": "preset:dogma",
    "best-of-default-run": str(HERE / "genomes" / "default_run_best.yaml"),
}
BASELINE = "llama"
# Peak dense bf16 throughput of one H100 SXM (989 TFLOP/s) at 40 % model FLOPs utilisation:
# the --estimate's assumption for a GPU-hour (state yours with --flops-per-gpu-second).
GPU_FLOPS_PER_S = 0.4 * 989e12


def plans(args: argparse.Namespace) -> dict[str, Plan]:
    task = get_task(args.task)
    pinned = {"vocab": task.vocab_size, "max_len": task.seq_len}
    budget = (
        Budget(tokens=round(args.tokens))
        if args.tokens is not None
        else Budget(per_param=args.tokens_per_param or DEFAULT_TOKENS_PER_PARAM)
    )
    out = {}
    for name, source in DESIGNS.items():
        if args.only and name not in args.only:
            continue
        genome = load_genome(source)
        design = Design.of(
            genome, pinned, f"{name} ({source.rsplit('/', 1)[-1]})", preset=source.startswith("preset:")
        )
        sizes = sizes_for(name, args.sizes) or compact_sizes(design, "both")
        out[name] = make_plan(design, "both", args.task, sizes, [budget], args.seeds, args.timeout)
    return out


def size_spec(text: str) -> tuple[str | None, list[float]]:
    """``--sizes``: ``SIZES`` for every design, or ``NAME=SIZES`` for the design NAME."""
    name, sep, sizes = text.rpartition("=")
    if sep and name not in DESIGNS:
        raise argparse.ArgumentTypeError(f"unknown design {name!r} (one of {', '.join(DESIGNS)})")
    return (name if sep else None), counts(sizes)


def sizes_for(name: str, specs: list[tuple[str | None, list[float]]] | None) -> list[float] | None:
    """The size targets of design ``name``: its own ``NAME=SIZES`` (the last given), else
    the last unnamed ``SIZES``, else None (its compact ladder)."""
    chosen = {key: sizes for key, sizes in specs or []}
    return chosen.get(name, chosen.get(None))


def training_flops(plan: Plan) -> float:
    """The plan's training FLOPs: 3 × forward FLOPs per token × tokens, per point (the model
    of ``evaluation.budget.training_flops``: ≈ 6·N·D plus the sequence mixer's term)."""
    seq_len = get_task(plan.task).seq_len
    per_token = {r.genome.id: account(r.genome, seq_len).flops_per_token for r in plan.rungs}
    return float(sum(3 * per_token[p.genome_id] * p.tokens for p in plan.points))


def estimate(ladders: dict[str, Plan], flops_per_s: float) -> dict[str, Any]:
    rows = {name: training_flops(plan) for name, plan in ladders.items()}
    total = sum(rows.values())
    return {
        "designs": {
            name: {
                "sizes": [r.params for r in ladders[name].rungs],
                "total_params": [r.total_params for r in ladders[name].rungs],
                "regime": None if (regime := ladders[name].regime) is None else regime.to_dict(),
                "tokens": sorted({p.tokens for p in ladders[name].points}),
                "train_flops": flops,
                "gpu_hours": flops / flops_per_s / 3600,
            }
            for name, flops in rows.items()
        },
        "train_flops": total,
        "gpu_hours": total / flops_per_s / 3600,
        "flops_per_gpu_second": flops_per_s,
    }


def run(args: argparse.Namespace, ladders: dict[str, Plan]) -> dict[str, Any]:
    started = time.perf_counter()
    store = Store(args.store, create=True)
    try:
        recorders = {name: Recorder(store, plan) for name, plan in ladders.items()}
        todo = [(rec, p) for rec in recorders.values() for p in rec.lookup()]
        print(
            f"{len(todo)} of {sum(len(p.points) for p in ladders.values())} points to train", file=sys.stderr
        )

        def open_pool() -> Any:
            return ladder_pool(store, todo, args.workers, args.ray_address, args.timeout)

        train_recorded(list(recorders.values()), todo, open_pool, _progress(started))
    finally:
        store.close()
    results: dict[str, Any] = {}
    fits = {}
    for name, plan in ladders.items():
        try:
            summary, fit = plan_summary(plan, args.boot)
        except LadderError as e:
            results[name] = {"refused": str(e), "points": [p.to_dict() for p in plan.points]}
            continue
        results[name], fits[name] = summary, fit
    for name, data in results.items():
        if name == BASELINE or name not in fits or BASELINE not in fits:
            continue
        try:
            # compare(A = the transformer, B = this design) on the ladders' budget
            data["against_llama"] = comparison_dict(fits[BASELINE], fits[name], ladders[BASELINE], data)
        except LadderError as e:
            data["against_llama"] = {"refused": str(e)}
    return {
        "designs": results,
        "task": args.task,
        "seeds": args.seeds,
        "budget": next(iter(ladders.values())).budgets[0].to_dict(),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


def _progress(started: float) -> Any:
    def on_point(rec: Recorder, p: Any, done: int, total: int) -> None:
        what = f"loss {p.loss:.4f}" if p.loss is not None else str(p.status)
        print(
            f"  [{done}/{total}] {rec.plan.source}: {p.params:,} params, seed {p.replicate}, "
            f"{p.tokens:,} tokens: {what}, {p.metrics.get('train_seconds', 0):.0f} s; "
            f"{time.perf_counter() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )

    return on_point


def _ci(v: float, ci: list[float]) -> str:
    return f"{v:.3g} [{ci[0]:.3g}, {ci[1]:.3g}]"


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{result['task']}, {result['seeds']} seeds per size, budget {result['budget']}, "
        f"{result['wall_seconds']:.0f} s",
        "| design | sizes (non-embedding params) | E | A | α | residual | β vs llama (range) "
        "| loss gap vs llama at mid [95%] |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, d in result["designs"].items():
        if "refused" in d:
            lines.append(f"| {name} | - | refused: {d['refused']} | | | | | |")
            continue
        f = d["fit"]
        sizes = ", ".join(f"{r['params']:,}" for r in d["rungs"])
        beta = gap = "-"
        c = d.get("against_llama")
        if c and "refused" not in c:
            k, kr = c["beta"], c["beta_range"]
            beta = (
                "undefined"
                if k is None
                else f"{1 / k:.3g}" + (f" ({1 / kr[1]:.3g}-{1 / kr[0]:.3g})" if kr else "")
            )
            lo, hi = c["loss_gap_mid_ci"]
            gap = f"{c['loss_gap_mid']:+.3f} [{lo:+.3f}, {hi:+.3f}]"
        elif c:
            beta = f"refused: {c['refused']}"
        lines.append(
            f"| {name} | {sizes} | {_ci(f['E'], f['E_ci'])} | {_ci(f['A'], f['A_ci'])} | "
            f"{_ci(f['alpha'], f['alpha_ci'])} | {f['residual']:.4f} | {beta} | {gap} |"
        )
    lines.append(
        "β = 1/k (Proposition 15.2's sense): > 1, the design reaches the transformer's loss with less."
    )
    lines.append(
        "loss gap = L_design − L_llama at the geometric middle of the shared sizes (negative: better)."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes",
        type=size_spec,
        action="append",
        metavar="[NAME=]SIZES",
        help="parameter targets for every design (e.g. 10M,100M,1B), or NAME=SIZES for one "
        "design (repeatable; e.g. llama=4k,15k,33k,60k,120k,250k)",
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--tokens", type=float, help="one token count for every point (fixed data: not a scaling law)"
    )
    budget.add_argument(
        "--tokens-per-param",
        type=float,
        help=f"D = r·N, N non-embedding (default {DEFAULT_TOKENS_PER_PARAM:g})",
    )
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument(
        "--task", default=DEFAULT_TASK, help=f"{DEFAULT_TASK} (default), or bytelm:PATH for your own text"
    )
    parser.add_argument(
        "--only", type=lambda s: s.split(","), help=f"a comma list among {', '.join(DESIGNS)}"
    )
    parser.add_argument("--store", default="sqlite:///scaling.db")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--ray-address")
    parser.add_argument("--timeout", type=float, default=86_400.0, help="seconds per point")
    parser.add_argument("--boot", type=int, default=1000)
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="print the ladders' training FLOPs and GPU-hours; train nothing",
    )
    parser.add_argument("--flops-per-gpu-second", type=float, default=GPU_FLOPS_PER_S)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        ladders = plans(args)
    except LadderError as e:
        print(f"scaling: {e}", file=sys.stderr)
        return 2
    for plan in ladders.values():
        for warning in plan.warnings:
            print(f"WARNING: {plan.source}: {warning}", file=sys.stderr)
        if plan.regime is not None:
            print(f"{plan.source}: {plan.regime.message}", file=sys.stderr)
    if args.estimate:
        est = estimate(ladders, args.flops_per_gpu_second)
        if args.json:
            print(json.dumps(est, indent=2))
        else:
            for name, d in est["designs"].items():
                sizes = ", ".join(f"{s:,}" for s in d["sizes"])
                print(f"{name}: sizes {sizes}; {d['train_flops']:.3g} FLOPs, {d['gpu_hours']:.3g} GPU-hours")
            print(
                f"total {est['train_flops']:.3g} training FLOPs = {est['gpu_hours']:.3g} GPU-hours at "
                f"{est['flops_per_gpu_second']:.3g} FLOP/s per GPU"
            )
        return 0
    result = run(args, ladders)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
