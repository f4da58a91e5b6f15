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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=24, help="panel size, presets included (24)")
    parser.add_argument("--seed", type=int, default=12, help="the panel's draw (12, the held-out panel)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (300, the default fidelity)")
    parser.add_argument("--json", type=Path, default=None, help="write every member's results here")
    args = parser.parse_args(argv)
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
        for arm in ARMS:
            started = time.perf_counter()
            row[arm] = quality(member.genome.to_yaml(), member.genome.id, args.steps, arm)
            row[arm]["seconds"] = round(time.perf_counter() - started, 1)
        rows.append(row)
        print(
            f"[{i}/{len(panel)}] {member.name} ({row['family']}): "
            + ", ".join(f"{a} {row[a]['quality']} ({row[a]['seconds']} s)" for a in ARMS),
            file=sys.stderr,
            flush=True,
        )
        if args.json is not None:  # after every member: a long run keeps what it measured
            args.json.write_text(json.dumps({"steps": args.steps, "seed": args.seed, "rows": rows}, indent=2))
    both = [r for r in rows if all(r[a]["quality"] is not None for a in ARMS)]
    xs = [r["fp32"]["quality"] for r in both]
    ys = [r["bf16"]["quality"] for r in both]
    transfer = rank_transfer(xs, ys).to_dict()
    k = max(1, len(both) // 4)
    top = {r["genome_id"] for r in sorted(both, key=lambda r: -r["fp32"]["quality"])[:k]}
    top_bf16 = {r["genome_id"] for r in sorted(both, key=lambda r: -r["bf16"]["quality"])[:k]}
    print(f"| member | family | fp32 quality | bf16 quality | {' | '.join(f'{a} s' for a in ARMS)} |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        q = [f"{r[a]['quality']:.4f}" if r[a]["quality"] is not None else r[a]["status"] for a in ARMS]
        print(
            f"| {r['name']} | {r['family']} | {q[0]} | {q[1]} "
            f"| {r['fp32']['seconds']} | {r['bf16']['seconds']} |"
        )
    lo, hi = transfer.get("spearman_low"), transfer.get("spearman_high")
    print(
        f"\n{len(both)} of {len(rows)} members measured in both "
        f"({args.steps} steps, panel seed {args.seed}): "
        f"Spearman {transfer['spearman']:+.3f} [{lo:+.3f}, {hi:+.3f}]; top-{k} overlap "
        f"{len(top & top_bf16)}/{k}; mean |Δ quality| "
        f"{statistics.mean(abs(x - y) for x, y in zip(xs, ys, strict=True)):.4f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
