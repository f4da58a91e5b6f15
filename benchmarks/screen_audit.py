"""What a run's first stage screened out: its bred children trained in full after the fact.

A multi-fidelity run trains every bred child for `first_fidelity` steps and only the
promoted share (`promote`, by held-out loss) at the full `steps`. The fidelity-transfer
audit correlates the promoted children alone, a range-restricted sample; `evolve calibrate`
measures a fixed panel of presets and random genomes, most of them far apart. Neither says
what the screen costs where the search spends its children: among the incumbent's
neighbours. This trains every child of generations >= 1 (with --from-generation 0, the
initial population too) that the first stage did NOT promote at the full fidelity, under
the seed its first stage used (the run's seed policy derives a genome's training seed
without the fidelity, so the promoted ones were trained in full under that same seed), and
reports per generation:

    promoted / unpromoted: n, mean and best full-fidelity quality (and overall: the best
         unpromoted child, which a search that trained everything in full would have seen)
    rho: Spearman of the first-stage held-out loss against full-fidelity quality over all
         bred children that trained (loss ascending = better; so rho is reported as the
         correlation of -loss with quality), with a 95 % bootstrap interval
         (`evaluation.transfer.rank_transfer`: none below 3 pairs, no interval below 6)
    recall: of the k best children in full (k = the number promoted), how many were promoted

Each child is trained once; the results are kept in --out (a JSON side file) as they land,
so an interrupted audit resumes. Run from the repository root:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/screen_audit.py --store sqlite:///runs.db \
        --out /tmp/audit.json [--run RUN_ID] [--processes 2] [--from-generation 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dogma_evolve.evaluation import EvalRequest  # noqa: E402
from dogma_evolve.evaluation.evaluate import evaluate  # noqa: E402
from dogma_evolve.evaluation.transfer import rank_transfer  # noqa: E402
from dogma_evolve.evolution.config import RunConfig  # noqa: E402
from dogma_evolve.evolution.objectives import quality_of  # noqa: E402
from dogma_evolve.store import Store  # noqa: E402


@dataclass(frozen=True)
class Child:
    """One bred child of the run and what the run measured of it."""

    generation: int
    genome_id: str
    yaml: str
    seed: int
    operator: str | None
    first_loss: float  # held-out loss at the first stage (nan when the row has none)
    full: float | None  # full-fidelity quality the run measured (0: failed; None: not promoted)


def children(store: Store, run_id: str, config: RunConfig, first_generation: int = 1) -> list[Child]:
    """Births of generations >= `first_generation` (1: the bred children; 0: the initial
    population too) with an ok first-stage row, each genome once."""
    first, full = config.first_fidelity, config.steps
    if first is None:
        raise ValueError(f"run {run_id} has no first stage (first_fidelity off): nothing was screened")
    out: dict[str, Child] = {}
    for rec in store.individuals(run_id):
        if rec.generation < first_generation or rec.genome_id in out:
            continue
        rows = [e for e in rec.evaluations if e.task == config.task]
        screen = [e for e in rows if e.fidelity == first and e.status == "ok"]
        if not screen:
            continue
        trained = [e for e in rows if e.fidelity == full]  # promoted: its full row, failed or not
        out[rec.genome_id] = Child(
            rec.generation,
            rec.genome_id,
            rec.yaml,
            screen[0].seed,
            rec.operator,
            float((screen[0].metrics or {}).get("loss", float("nan"))),
            (quality_of(trained[0].metrics) if trained[0].status == "ok" else 0.0) if trained else None,
        )
    return list(out.values())


def train_full(job: tuple[str, str, str, int, int, float | None]) -> tuple[str, float]:
    """(genome id, full-fidelity quality; 0 for a failure) of one unpromoted child."""
    yaml, genome_id, task, steps, seed, timeout_s = job
    torch.set_num_threads(1)
    request = EvalRequest(
        genome_yaml=yaml, genome_id=genome_id, task=task, fidelity=steps, seed=seed, timeout_s=timeout_s
    )
    result = evaluate(request)
    return genome_id, quality_of(result.metrics) if result.status == "ok" else 0.0


def summarise(kids: list[Child], trained: dict[str, float]) -> dict[str, Any]:
    """Per generation and overall: the numbers of the module docstring."""

    def block(group: list[Child]) -> dict[str, Any]:
        promoted = [c.full for c in group if c.full is not None]
        unpromoted = [trained[c.genome_id] for c in group if c.full is None and c.genome_id in trained]
        full = {c.genome_id: (c.full if c.full is not None else trained.get(c.genome_id)) for c in group}
        ranked = sorted((g for g in full if full[g] is not None), key=lambda g: -float(full[g] or 0.0))
        k = len(promoted)
        top = set(ranked[:k])
        recall = sum(1 for c in group if c.full is not None and c.genome_id in top)
        pairs = [(-c.first_loss, full[c.genome_id]) for c in group if np.isfinite(c.first_loss)]
        pairs = [(a, float(b)) for a, b in pairs if b is not None]
        t = rank_transfer([a for a, _ in pairs], [b for _, b in pairs])
        rho = None if t.spearman is None else (t.spearman, t.spearman_low, t.spearman_high)
        return {
            "promoted": stat(promoted),
            "unpromoted": stat(unpromoted),
            "recall": [recall, k],
            "rho": rho,
        }

    generations = sorted({c.generation for c in kids})
    out = {"generations": {g: block([c for c in kids if c.generation == g]) for g in generations}}
    out["all"] = block(kids)
    screened = [c for c in kids if c.full is None and c.genome_id in trained]
    if not screened:
        out["best_unpromoted"] = None
        return out
    best = max(screened, key=lambda c: trained[c.genome_id])
    out["best_unpromoted"] = {
        "genome_id": best.genome_id,
        "generation": best.generation,
        "operator": best.operator,
        "quality": trained[best.genome_id],
        "first_loss": best.first_loss,
    }
    return out


def stat(values: list[float]) -> dict[str, float | int]:
    return {
        "n": len(values),
        "mean": float(np.mean(values)) if values else float("nan"),
        "best": max(values, default=float("nan")),
    }


def table(summary: dict[str, Any]) -> str:
    lines = [
        "| generation | promoted: n, mean, best | unpromoted in full: n, mean, best | top-k recall"
        " | ρ(−loss@first, quality) [95 %] |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows = [(str(g), b) for g, b in summary["generations"].items()] + [("all", summary["all"])]
    for name, b in rows:
        p, u = b["promoted"], b["unpromoted"]
        rho = "-" if b["rho"] is None else f"{b['rho'][0]:+.2f}"
        if b["rho"] is not None and b["rho"][1] is not None:
            rho += f" [{b['rho'][1]:+.2f}, {b['rho'][2]:+.2f}]"
        lines.append(
            f"| {name} | {p['n']}, {p['mean']:.3f}, {p['best']:.3f}"
            f" | {u['n']}, {u['mean']:.3f}, {u['best']:.3f} | {b['recall'][0]} of {b['recall'][1]} | {rho} |"
        )
    best = summary["best_unpromoted"]
    if best is None:
        return "\n".join(lines)
    lines.append(
        f"best unpromoted: {best['genome_id'][:12]} (generation {best['generation']}, {best['operator']}) "
        f"{best['quality']:.3f}, first-stage loss {best['first_loss']:.3f}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--run", help="run id (default: the store's only search run)")
    parser.add_argument("--out", required=True, type=Path, help="side file of the trainings (resumed)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--from-generation",
        type=int,
        default=1,
        help="first generation audited (1; 0: the initial population too)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with Store(args.store) as store:
        runs = [r.id for r in store.list_runs("search")]
        run_id = args.run or (runs[0] if len(runs) == 1 else None)
        if run_id is None or run_id not in runs:
            print(
                f"error: name one of the store's search runs with --run: {', '.join(runs) or 'none'}",
                file=sys.stderr,
            )
            return 2
        record = store.get_run(run_id)
        assert record is not None
        config = RunConfig.from_dict(record.config)
        try:
            kids = children(store, run_id, config, args.from_generation)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    done: dict[str, float] = json.loads(args.out.read_text()) if args.out.exists() else {}
    jobs = [
        (c.yaml, c.genome_id, config.task, config.steps, c.seed, config.timeout_s)
        for c in kids
        if c.full is None and c.genome_id not in done
    ]
    print(f"run {run_id}: {len(kids)} candidates, {len(jobs)} to train in full", file=sys.stderr)
    with ProcessPoolExecutor(max(1, args.processes)) as pool:
        for n, (genome_id, quality) in enumerate(pool.map(train_full, jobs), 1):
            done[genome_id] = quality
            args.out.write_text(json.dumps(done, indent=1))
            print(f"  {n}/{len(jobs)} {genome_id[:12]} {quality:.3f}", file=sys.stderr)
    summary = summarise(kids, done)
    print(json.dumps(summary, indent=1, default=str) if args.json else table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
