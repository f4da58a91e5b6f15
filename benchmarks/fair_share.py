"""Does a search take its fair share of a shared machine? One seeded `evolve run`, timed alone
and beside busy programs at ordinary priority (niceness 0), once per worker niceness.

Each arm is a fresh store and the same command,

    evolve run --population P --generations G --steps S --seed K --workers W --quiet --json

with ``EVOLVE_WORKER_NICENESS`` set to the arm's value (`evaluation.niceness`). The busy
programs are ``B`` Python loops started before the run and stopped after it. A run that has
not finished after ``--limit`` seconds is stopped and reported as such. Each finished arm's
stored evaluations (genome, fidelity, seed, status, quality) must equal the quiet arm's: a
slower run may not change what it finds.

On C cores with B busy loops and W workers at the same niceness, each process gets about
C / (B + W) of a core when B + W ≥ C: a run's fair share is (B + W) / C times its quiet time
(3 for 4 loops and 2 workers on 2 cores).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fair_share.py [--busy 4] [--niceness 0,15]
        [--population 12] [--generations 1] [--steps 300] [--seed 0] [--limit 900] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dogma_evolve.evaluation.niceness import ENV  # noqa: E402
from dogma_evolve.store import Store  # noqa: E402

BUSY_LOOP = "while True:\n    pass\n"


@dataclass(frozen=True)
class Arm:
    """One timed run: ``busy`` loops beside it, its workers ``niceness`` lower than it."""

    busy: int
    niceness: int
    wall_s: float
    finished: bool
    same_results: bool | None  # None: the quiet arm itself, or an unfinished run


def evaluations(url: str) -> list[tuple[Any, ...]]:
    """The run's stored evaluations in a comparable order: (genome, fidelity, seed, status,
    quality rounded to 1e-9)."""
    with Store(url) as store:
        (run,) = store.list_runs()
        rows = [
            (e.genome_id, str(e.fidelity), e.seed, e.status, round(float(e.metrics.get("quality", 0.0)), 9))
            for ind in store.individuals(run.id)
            for e in ind.evaluations
        ]
    return sorted(set(rows))


def run_arm(args: argparse.Namespace, folder: Path, busy: int, niceness: int) -> tuple[float, bool, str]:
    """Time one run beside ``busy`` loops; (wall seconds, finished, store URL)."""
    url = f"sqlite:///{folder / f'busy{busy}_nice{niceness}.db'}"
    command = [
        str(Path(sys.executable).parent / "evolve"),
        "run",
        "--population", str(args.population),
        "--generations", str(args.generations),
        "--steps", str(args.steps),
        "--seed", str(args.seed),
        "--workers", str(args.workers),
        "--quiet", "--json",
        "--store", url,
    ]  # fmt: skip
    env = {**os.environ, ENV: str(niceness), "OMP_NUM_THREADS": "1"}
    loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        start = time.monotonic()
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.limit)
            finished = done.returncode == 0
            if not finished:
                sys.stderr.write(done.stderr[-2000:])
        except subprocess.TimeoutExpired:
            finished = False
        wall = time.monotonic() - start
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    return wall, finished, url


def measure(args: argparse.Namespace) -> list[Arm]:
    """The quiet arm first (its results are the reference), then each niceness beside the loops."""
    arms: list[Arm] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        wall, finished, quiet_url = run_arm(args, folder, 0, args.niceness[0])
        if not finished:
            raise SystemExit("fair_share: the quiet run did not finish; nothing to compare against")
        reference = evaluations(quiet_url)
        arms.append(Arm(0, args.niceness[0], wall, True, None))
        for niceness in args.niceness:
            wall, finished, url = run_arm(args, folder, args.busy, niceness)
            same = evaluations(url) == reference if finished else None
            arms.append(Arm(args.busy, niceness, wall, finished, same))
            print(f"  busy {args.busy}, niceness {niceness}: {wall:.0f} s", file=sys.stderr)
    return arms


def table(arms: list[Arm], cores: int, workers: int) -> str:
    """The markdown table: each arm's wall time, its ratio to the quiet run and to its fair share."""
    quiet = arms[0].wall_s
    lines = [
        "| busy loops | worker niceness | wall | × quiet | fair share | finished | same results |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm in arms:
        share = max(1.0, (arm.busy + workers) / cores) if arm.busy else 1.0
        wall = f"{arm.wall_s:.0f} s" if arm.finished else f"> {arm.wall_s:.0f} s (stopped)"
        same = "reference" if arm.same_results is None and arm.finished else str(arm.same_results).lower()
        lines.append(
            f"| {arm.busy} | {arm.niceness} | {wall} | {arm.wall_s / quiet:.1f} | {share:.1f} | "
            f"{'yes' if arm.finished else 'no'} | {same} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--niceness", type=lambda s: [int(x) for x in s.split(",")], default=[0, 15])
    parser.add_argument("--population", type=int, default=12)
    parser.add_argument("--generations", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=float, default=900.0, help="seconds before a run is stopped")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    arms = measure(args)
    if args.json:
        print(json.dumps([asdict(a) for a in arms], indent=1))
    else:
        print(table(arms, os.cpu_count() or 1, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
