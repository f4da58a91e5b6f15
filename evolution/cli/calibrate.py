"""The `evolve calibrate` command: train a fixed panel (the space's presets and random
genomes) at a ladder of step counts and a longer target, and print per rung how well it
ranks the panel as the full fidelity and the target do (`evolution.calibrate`).

Bad input exits 2 with one line on stderr before anything is trained or a run is created;
progress goes to stderr, one line per trained point; `--json` prints the summary as one
document. The study loads torch, so the handler imports it when it runs: every `evolve`
command builds this parser."""

from __future__ import annotations

import argparse
import time
from typing import Any

from dogma_evolve.evaluation.options import PRECISIONS
from dogma_evolve.evolution.calibrate.defaults import (
    DEFAULT_PROMOTE,
    DEFAULT_RANDOM,
    DEFAULT_STEPS,
    DEFAULT_TIMEOUT_S,
    TARGET_FACTOR,
    default_rungs,
)
from dogma_evolve.evolution.cli import output
from dogma_evolve.evolution.cli.tasks import add_plugin_option, load_plugin_option, pin_task_option
from dogma_evolve.evolution.cli.training import add_training_options, check_training_options
from dogma_evolve.evolution.config import QUALITY_FLOOR, RunConfig
from dogma_evolve.evolution.errors import UsageError


def add_calibrate_command(sub: Any, common: argparse.ArgumentParser) -> None:
    cal = sub.add_parser(
        "calibrate",
        parents=[common],
        help="how well short trainings rank a panel of genomes as the full and a long one do",
        description="Train the space's generation-0 presets and --random random genomes at each rung "
        "(--rungs, with --steps among them) and at --target; per rung print Spearman's and Kendall's "
        "correlation (95% bootstrap intervals) with the full fidelity and the target over the whole "
        "panel, the top-k recall of promoting the best --promote fraction at that rung, the same "
        "for the rung's held-out loss below the full fidelity (a search's first stage promotes by it "
        "on one task), and the quality distribution. Recorded as a run in the store: a second "
        "invocation trains only what is missing.",
    )
    cal.add_argument(
        "--task",
        default="suite",
        help="task, or a comma list of tasks (suite); MODULE:CLASS[?key=value&...] for your own",
    )
    cal.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help=f"the full fidelity (default {DEFAULT_STEPS})"
    )
    cal.add_argument(
        "--rungs",
        metavar="S,S,...",
        help="comma list of step counts (default: 60, half of --steps and --steps; --steps is always one)",
    )
    cal.add_argument(
        "--target", type=int, help=f"the long training, above every rung (default {TARGET_FACTOR} x --steps)"
    )
    cal.add_argument(
        "--random",
        type=int,
        default=DEFAULT_RANDOM,
        metavar="N",
        help=f"random genomes of the space (default {DEFAULT_RANDOM})",
    )
    cal.add_argument("--presets", type=int, metavar="K", help="only the first K presets (default: all)")
    cal.add_argument("--seed", type=int, default=0, help="seed of the random genomes (0)")
    cal.add_argument(
        "--max-params",
        type=int,
        default=RunConfig.max_params,
        help=f"hard parameter budget of the panel ({RunConfig.max_params:,})",
    )
    cal.add_argument(
        "--promote",
        type=float,
        default=DEFAULT_PROMOTE,
        help=f"fraction a promotion keeps (default {DEFAULT_PROMOTE})",
    )
    cal.add_argument(
        "--floor",
        type=float,
        default=QUALITY_FLOOR,
        help=f"quality floor (default {QUALITY_FLOOR}; -1: none)",
    )
    cal.add_argument("--precision", default="auto", choices=PRECISIONS, help="auto, fp32 or bf16 (auto)")
    add_plugin_option(cal)
    add_training_options(cal, DEFAULT_TIMEOUT_S)
    cal.set_defaults(func=cmd_calibrate)


def _rungs(args: argparse.Namespace) -> tuple[int, ...]:
    if args.rungs is None:
        return default_rungs(args.steps)
    try:
        rungs = tuple(int(r) for r in args.rungs.split(",") if r.strip())
    except ValueError:
        raise UsageError(f"--rungs {args.rungs!r}: a comma list of step counts") from None
    if not rungs:
        raise UsageError("--rungs: no step count given")
    return rungs


def plan_of(args: argparse.Namespace) -> Any:
    """The calibration the arguments ask for; every refusal is a one-line ``UsageError``,
    before anything is written."""
    from dogma_evolve.evolution.calibrate.study import CalibrateError, make_plan  # torch

    check_training_options(args)
    args.task = pin_task_option(args.task)  # a user's task: imported and pinned, named on stderr
    plugin_code = load_plugin_option(args.plugins, contract=True)  # the panel may draw their kinds
    target = args.target if args.target is not None else TARGET_FACTOR * args.steps
    try:
        return make_plan(
            args.task,
            args.steps,
            _rungs(args),
            target,
            args.random,
            args.presets,
            args.seed,
            args.max_params,
            args.precision,
            args.timeout,
            args.promote,
            None if args.floor == -1 else args.floor,
            plugin_code,
        )
    except CalibrateError as e:
        raise UsageError(str(e)) from None


def cmd_calibrate(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.calibrate.study import Recorder, summary, train
    from dogma_evolve.evolution.calibrate.table import calibration_lines

    plan = plan_of(args)
    err = output.err()
    started = time.perf_counter()
    with output.open_store(args.store, create=True) as store:
        recorder = Recorder(store, plan)
        todo = recorder.lookup()
        if not args.quiet:
            have = len(plan.points) - len(todo)
            rungs = ", ".join(map(str, plan.ladder.rungs))
            err.print(
                f"calibrate {len(plan.members)} genomes on {plan.task} at {rungs} "
                f"and {plan.ladder.target} steps; run {recorder.run_id}"
                f"{' (resumed)' if recorder.resumed else ''}: {have} of {len(plan.points)} trainings "
                f"stored, {len(todo)} to train"
            )
        failed = True
        try:
            if todo:
                try:
                    with _pool(args, store, recorder.run_id) as pool:
                        train(recorder, todo, pool, None if args.quiet else point_printer(err, plan, started))
                except ConnectionError as e:  # e.g. --ray-address that nothing answers at
                    raise UsageError(str(e)) from None
            failed = False
        finally:
            recorder.finish(failed)
        data = summary(plan)
        recorder.put_transfer(data["rows"])
    data["trained"] = len(todo)
    data["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        output.emit_json(data)
        return 0
    out = output.out()
    for line in calibration_lines(data):
        out.print(line)
    out.print(f"{data['trained']} trainings in {data['wall_seconds']} s")
    return 0


def point_printer(err: Any, plan: Any, started: float) -> Any:
    """One progress line per trained point on ``err``, with the seconds since ``started``."""
    from dogma_evolve.evolution.objectives import quality_of

    def on_point(p: Any, done: int, total: int) -> None:
        what = f"quality {quality_of(p.metrics):.4f}" if p.status == "ok" else f"{p.status}"
        seconds = p.metrics.get("train_seconds")
        took = f", {seconds:.1f} s" if isinstance(seconds, int | float) else ""
        task = f" on {p.task}" if len(plan.tasks) > 1 else ""
        err.print(
            f"  [{done}/{total}] {plan.members[p.member].name}, {p.steps:,} steps{task}: {what}{took}; "
            f"{time.perf_counter() - started:.0f} s"
        )

    return on_point


def _pool(args: argparse.Namespace, store: Any, run_id: str) -> Any:
    """The Ray pool of `evolve run`, its leases logged to the calibration's run (tests replace it)."""
    from dogma_evolve.evolution.pools import ray_pool

    return ray_pool(store, run_id, args.workers, args.ray_address, args.timeout)
