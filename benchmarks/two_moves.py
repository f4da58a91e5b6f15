"""Is a genome on a plateau that single mutations cannot leave? Coupled moves, trained in full.

A learned-position attention model solves the suite's compression member and stays low on
recall; the default run's local search stops there (docs/results.md, "the better basin is
two moves away"). This trains the genome and five variants at the full fidelity under fresh
seeds: each of two moves alone and both together,

    positions none      the structural region's `positions` set to none
    conv first          a coding region [T:conv(kernel=4)] put before every other region
    lstm first          a coding region [T:lstm(hidden=d_model)] put before every other region
    none + conv first, none + lstm first

and prints the suite's quality and its five members for each (`evaluation.evaluate` with
the suite task, as a run trains). The variants are plain genome edits: nothing here is part
of the search space's operators.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/two_moves.py GENOME.yaml [--seeds 101,102]
        [--steps 300] [--processes 2] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from dogma_evolve.evaluation import EvalRequest  # noqa: E402
from dogma_evolve.evaluation.evaluate import evaluate  # noqa: E402
from dogma_evolve.evolution.objectives import quality_of  # noqa: E402
from dogma_evolve.genome.yaml_io import dump_yaml, load_yaml  # noqa: E402

MEMBERS = ("mqar", "selective_copying", "noisy_recall", "fuzzy_recall", "compression")


def first_region(doc: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """`doc` with a new coding region holding `base` before its first coding region."""
    out = copy.deepcopy(doc)
    regions = out["regions"]
    at = next(i for i, r in enumerate(regions) if r["type"] == "coding")
    taken = {r["id"] for r in regions}
    new_id = next(f"c{n}" for n in range(len(regions) + 1) if f"c{n}" not in taken)
    regions.insert(at, {"id": new_id, "type": "coding", "bases": [base]})
    return out


def no_positions(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for region in out["regions"]:
        if region["type"] == "structural":
            region["settings"]["positions"] = "none"
    return out


def variants(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The genome and its five edits (module docstring), by name."""
    width = next(r["settings"]["d_model"] for r in doc["regions"] if r["type"] == "structural")
    conv = {"base": "T", "kind": "conv", "params": {"kernel": 4}}
    lstm = {"base": "T", "kind": "lstm", "params": {"hidden": width}}
    return {
        "as is": doc,
        "positions none": no_positions(doc),
        "conv first": first_region(doc, conv),
        "lstm first": first_region(doc, lstm),
        "none + conv first": first_region(no_positions(doc), conv),
        "none + lstm first": first_region(no_positions(doc), lstm),
    }


def train(job: tuple[str, str, int, int]) -> dict[str, Any]:
    """One variant under one seed: quality, members, parameters (0 and the reason on failure)."""
    name, text, seed, steps = job
    torch.set_num_threads(1)
    result = evaluate(
        EvalRequest(genome_yaml=text, genome_id=f"{name}/{seed}", task="suite", fidelity=steps, seed=seed)
    )
    metrics = result.metrics or {}
    ok = result.status == "ok"
    return {
        "variant": name,
        "seed": seed,
        "quality": quality_of(metrics) if ok else 0.0,
        "members": metrics.get("per_task", {}) if ok else {},
        "params": metrics.get("params"),
        "failure": None if ok else result.reason,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("genome", type=Path)
    parser.add_argument("--seeds", default="101,102")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    doc = load_yaml(args.genome.read_text())
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = [(name, dump_yaml(v), seed, args.steps) for name, v in variants(doc).items() for seed in seeds]
    with ProcessPoolExecutor(max(1, args.processes)) as pool:
        rows = list(pool.map(train, jobs))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    header = f"quality ({', '.join(map(str, seeds))}) | {', '.join(MEMBERS)} (seed {seeds[0]})"
    print(f"| variant | params | {header} |")
    print("| --- | --- | --- | --- |")
    for name in variants(doc):
        mine = [r for r in rows if r["variant"] == name]
        qualities = ", ".join(f"{r['quality']:.3f}" for r in mine)
        members = ", ".join(f"{mine[0]['members'].get(m, float('nan')):.2f}" for m in MEMBERS)
        print(f"| {name} | {mine[0]['params']} | {qualities} | {members} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
