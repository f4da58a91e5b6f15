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
from dogma_evolve.evolution.cli.training import add_training_options, check_training_options, train_run
from dogma_evolve.evolution.config import QUALITY_FLOOR, RunConfig
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.scale.defaults import DEFAULT_TOKENS_PER_PARAM


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
        default="text",
        help="task, or a comma list of tasks (text); MODULE:CLASS[?key=value&...] for your own",
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
    cal.add_argument(
        "--stratify",
        action="store_true",
        help="draw the random genomes family by family (first sequence mixer)",
    )
    cal.add_argument(
        "--from-runs",
        metavar="RUN,...",
        help="add the best genome of each of these stored searches to the panel",
    )
    cal.add_argument(
        "--against",
        metavar="TASK",
        help="also rank the panel against this task's held-out loss after compute-optimal training "
        "(e.g. bytelm_en, English text) at each of --sizes",
    )
    cal.add_argument(
        "--sizes",
        metavar="X,X,...",
        default="1,4",
        help="with --against: growth factors of each member's non-embedding parameters (1,4)",
    )
    cal.add_argument(
        "--tokens-per-param",
        type=float,
        default=DEFAULT_TOKENS_PER_PARAM,
        help=f"with --against: training tokens per non-embedding parameter ({DEFAULT_TOKENS_PER_PARAM:g})",
    )
    cal.add_argument(
        "--against-max-params",
        type=int,
        metavar="N",
        help="with --against: train no member above N non-embedding parameters on the text (for a "
        "machine's time; each larger size also reports the smallest size's rankings on the same members)",
    )
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


def _sizes(text: str) -> tuple[float, ...]:
    try:
        sizes = tuple(float(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise UsageError(f"--sizes {text!r}: a comma list of growth factors") from None
    return sizes


def _run_ids(text: str | None) -> tuple[str, ...]:
    return tuple(r.strip() for r in (text or "").split(",") if r.strip())


def plan_of(args: argparse.Namespace) -> Any:
    """The calibration the arguments ask for (``--from-runs`` read from the store, read-only);
    every refusal is a one-line ``UsageError``, before anything is written."""
    from dogma_evolve.evolution.calibrate.calibration import CalibrateError, make_plan  # torch
    from dogma_evolve.evolution.calibrate.panel import stored_best
    from dogma_evolve.evolution.calibrate.text import check_fed, make_target
    from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace

    check_training_options(args)
    args.task = pin_task_option(args.task)  # a user's task: imported and pinned, named on stderr
    plugin_code = load_plugin_option(args.plugins, contract=True)  # the panel may draw their kinds
    target = args.target if args.target is not None else TARGET_FACTOR * args.steps
    try:
        text = (
            None
            if args.against is None
            else make_target(args.against, _sizes(args.sizes), args.tokens_per_param, args.against_max_params)
        )
        runs = _run_ids(args.from_runs)
        extra = []
        if runs:
            config = RunConfig(task=args.task, steps=args.steps, max_params=args.max_params)
            with output.open_reader(args.store) as store:
                extra = stored_best(DogmaSpace.from_config(config), store, runs)
        plan = make_plan(
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
            text=text,
            stratify=args.stratify,
            extra=extra,
            from_runs=runs,
        )
        if text is not None:  # a size or cap the text cannot feed: refused, not left untrained
            check_fed(list(plan.grown.values()), text)
        check_target_fed(plan, args.target is None)
    except (CalibrateError, ValueError) as e:
        raise UsageError(" ".join(str(e).split())) from None
    return plan


def check_target_fed(plan: Any, default: bool) -> None:
    """Refuse (``LadderError``, one line) a ``--target`` (the longest fitness training) that
    passes over a task's training text more than the epoch cap allows (`scale.regime.steps_cap`,
    as `evolve run` checks its ``--steps``)."""
    from dogma_evolve.evaluation.scaling import LadderError
    from dogma_evolve.evaluation.tasks import task_facts
    from dogma_evolve.evolution.scale.regime import steps_cap, text_tokens_of

    for name in plan.tasks:
        task = task_facts(name)  # a user's task: imported by pin_task_option
        per_step = task.train_batch_size * task.seq_len
        try:
            steps_cap("--target", plan.ladder.target, per_step, text_tokens_of(task), name)
        except LadderError as e:
            said = f" (the default --target is {TARGET_FACTOR} x --steps)" if default else ""
            raise LadderError(f"{e}{said}") from None


def cmd_calibrate(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.calibrate.calibration import Recorder, summary
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
            against = "" if plan.text is None else f", against {plan.text.task} at {args.sizes}"
            err.print(
                f"calibrate {len(plan.members)} genomes on {plan.task} at {rungs} "
                f"and {plan.ladder.target} steps{against}; run {recorder.run_id}"
                f"{' (resumed)' if recorder.resumed else ''}: {have} of {len(plan.points)} trainings "
                f"stored, {len(todo)} to train"
            )
            err.print(cost_line(plan, todo, args.workers))
        printer = None if args.quiet else point_printer(err, plan, started)
        train_run(recorder, todo, lambda: _pool(args, store, recorder.run_id), printer)
        data = summary(plan)
        recorder.put_transfer(data["rows"], data.get("text", {}).get("rows", ()))
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


def cost_line(plan: Any, todo: Any, workers: int | None) -> str:
    """What the trainings still to do cost, before any starts: tokens and training FLOPs
    (6·N·D, N the parameters the FLOP count sees per token), the part of the language target."""
    from dogma_evolve.evaluation.tasks import get_task
    from dogma_evolve.phenotype import account

    tokens = flops = text_flops = 0.0
    for p in todo:
        genome = plan.grown[(p.member, p.size)].genome if p.size else plan.members[p.member].genome
        task = get_task(p.task)
        d = p.steps * task.train_batch_size * task.seq_len
        f = 3 * account(genome).flops_per_token * d  # forward 2N, backward 4N: 3x the forward's
        tokens, flops = tokens + d, flops + f
        text_flops += f if p.size else 0.0
    share = f", {100 * text_flops / flops:.0f}% of it the language target" if flops and plan.text else ""
    return (
        f"cost of the {len(todo)} trainings to do: {tokens:,.0f} tokens, {flops:.3g} training FLOPs{share}, "
        f"on {workers or 'all'} worker(s)"
    )


def point_printer(err: Any, plan: Any, started: float) -> Any:
    """One progress line per trained point on ``err``, with the seconds since ``started``."""
    from dogma_evolve.evolution.objectives import quality_of

    def on_point(p: Any, done: int, total: int) -> None:
        what = f"quality {quality_of(p.metrics):.4f}" if p.status == "ok" else f"{p.status}"
        if p.size and p.status == "ok":
            what = f"text loss {p.metrics.get('loss', float('nan')):.4f} at {p.size:g}x"
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
