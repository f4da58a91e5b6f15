"""Does bfloat16 change what the search measures? The fitness in bf16 against fp32.

Protocol: a panel of genomes made as `evolve calibrate` makes its held-out panel (the
presets, then ``--members`` minus their count drawn family by family at ``--seed``;
`evolution.calibrate.panel.make_panel`; seed 12 is the panel the certificate was measured
on, not one the precision probe was tuned on: it was tuned on none). Each member is
evaluated as a search evaluates it (`evaluation.evaluate`, the default fitness ``text``,
``--steps`` training steps, the width rule's learning rate, the calibration's seed per
member) twice, once in each arithmetic, and the two fitnesses are compared: Spearman's ρ
with a bootstrap interval over members (`evaluation.transfer.rank_transfer`), the top-k
overlap, and the mean absolute difference in quality. A member that fails in either
arithmetic is counted apart. Target (issue 54): ρ ≥ 0.95.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/precision_rank.py --members 24 --json rank.json

The same panel in fp32 under two checkouts of the code (did a faster kernel change what the
fitness measures?): ``--arms fp32 --json`` once per checkout (``PYTHONPATH=OTHER/src`` runs
this script against another checkout), then ``--compare BEFORE.json AFTER.json``.

On a CPU without bfloat16 matrix instructions the bf16 arm is emulated: the same numbers as
on AMX, 5-10× slower.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dogma_evolve.evaluation import EvalRequest, evaluate  # noqa: E402
from dogma_evolve.evaluation.tasks import derive_seed  # noqa: E402
from dogma_evolve.evaluation.transfer import rank_transfer  # noqa: E402
from dogma_evolve.evolution.calibrate.panel import family_of, make_panel  # noqa: E402
from dogma_evolve.evolution.config import RunConfig  # noqa: E402
from dogma_evolve.evolution.spaces.registry import SPACES  # noqa: E402

TASK = "text"
ARMS = ("fp32", "bf16")


def quality(genome_yaml: str, genome_id: str, steps: int, precision: str) -> dict[str, Any]:
    """One evaluation as a search's: ``{"status", "quality", "seconds"}``."""
    request = EvalRequest(
        genome_yaml=genome_yaml,
        genome_id=genome_id,
        task=TASK,
        fidelity=steps,
        seed=derive_seed("eval", genome_id, TASK),
        precision=precision,
    )
    result = evaluate(request)
    return {
        "status": result.status,
        "quality": result.metrics.get("quality") if result.status == "ok" else None,
        "tokens_per_s": result.metrics.get("train_tokens_per_s"),
        "reason": result.reason,
    }


def compare(xs: list[float], ys: list[float], ids: list[str], label: str) -> str:
    """One line: Spearman's ρ of ``ys`` against ``xs`` with its bootstrap interval, the
    top-quarter overlap and the mean and largest absolute difference."""
    transfer = rank_transfer(xs, ys).to_dict()
    k = max(1, len(xs) // 4)
    top_x = {i for _, i in sorted(zip(xs, ids, strict=True), reverse=True)[:k]}
    top_y = {i for _, i in sorted(zip(ys, ids, strict=True), reverse=True)[:k]}
    lo, hi = transfer.get("spearman_low"), transfer.get("spearman_high")
    gaps = [abs(x - y) for x, y in zip(xs, ys, strict=True)]
    interval = f" [{lo:+.3f}, {hi:+.3f}]" if lo is not None and hi is not None else ""
    return (
        f"{label}: {len(xs)} members, Spearman {transfer['spearman']:+.4f}{interval}; "
        f"top-{k} overlap {len(top_x & top_y)}/{k}; |Δ quality| mean {statistics.mean(gaps):.2e}, "
        f"largest {max(gaps):.2e}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=24, help="panel size, presets included (24)")
    parser.add_argument("--seed", type=int, default=12, help="the panel's draw (12, the held-out panel)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (300, the default fidelity)")
    parser.add_argument("--arms", default=",".join(ARMS), help="arithmetics to train in (fp32,bf16)")
    parser.add_argument("--json", type=Path, default=None, help="write every member's results here")
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="train nothing: compare the fp32 fitness of two --json files (two checkouts' code)",
    )
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(p.read_text())["rows"] for p in args.compare)
        by_id = {r["genome_id"]: r for r in after}
        pairs = [
            (r["fp32"]["quality"], by_id[r["genome_id"]]["fp32"]["quality"], r["genome_id"])
            for r in before
            if r["genome_id"] in by_id
            and r["fp32"]["quality"] is not None
            and by_id[r["genome_id"]]["fp32"]["quality"] is not None
        ]
        xs, ys, ids = (list(t) for t in zip(*pairs, strict=True))
        print(compare(xs, ys, ids, f"fp32 fitness, {args.compare[1]} against {args.compare[0]}"))
        return 0
    arms = tuple(args.arms.split(","))
    config = RunConfig()
    space = SPACES[config.space].from_config(config)
    presets = make_panel(space, None, 0, args.seed)
    panel = make_panel(space, None, max(0, args.members - len(presets)), args.seed, stratify=True)
    rows: list[dict[str, Any]] = []
    for i, member in enumerate(panel, 1):
        row: dict[str, Any] = {
            "name": member.name,
            "genome_id": member.genome.id,
            "family": family_of(member.genome),
        }
        for arm in arms:
            started = time.perf_counter()
            row[arm] = quality(member.genome.to_yaml(), member.genome.id, args.steps, arm)
            row[arm]["seconds"] = round(time.perf_counter() - started, 1)
        rows.append(row)
        print(
            f"[{i}/{len(panel)}] {member.name} ({row['family']}): "
            + ", ".join(f"{a} {row[a]['quality']} ({row[a]['seconds']} s)" for a in arms),
            file=sys.stderr,
            flush=True,
        )
        if args.json is not None:  # after every member: a long run keeps what it measured
            args.json.write_text(json.dumps({"steps": args.steps, "seed": args.seed, "rows": rows}, indent=2))
    columns = [f"{a} quality" for a in arms] + [f"{a} s" for a in arms]
    print(f"| member | family | {' | '.join(columns)} |")
    print("| --- | --- |" + " --- |" * (2 * len(arms)))
    for r in rows:
        q = [f"{r[a]['quality']:.4f}" if r[a]["quality"] is not None else r[a]["status"] for a in arms]
        q += [str(r[a]["seconds"]) for a in arms]
        print(f"| {r['name']} | {r['family']} | {' | '.join(q)} |")
    if len(arms) == 2:
        both = [r for r in rows if all(r[a]["quality"] is not None for a in arms)]
        xs = [r[arms[0]]["quality"] for r in both]
        ys = [r[arms[1]]["quality"] for r in both]
        label = (
            f"{arms[1]} against {arms[0]} ({len(both)} of {len(rows)} measured in both, {args.steps} steps)"
        )
        print("\n" + compare(xs, ys, [r["genome_id"] for r in both], label))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
