"""The `evolve ablate ID` command: parse, plan the variants, train what the store lacks, print
each change's effect on quality (`evolution.ablate.ablation` has the plan and its run,
`evolution.training_run` the training, `evolution.ablate.changes` the changes,
`evolution.ablate.stats` the statistics).

Bad input exits 2 with one line on stderr before anything is trained or a run is created;
progress goes to stderr, one line per trained point.

The ablation (`evolution.ablate.ablation`, `.stats`, the store's individuals) loads torch, so the
handlers import it when they run: every `evolve` command builds this parser."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.table import Table

from dogma_evolve.evolution.ablate.defaults import DEFAULT_SEEDS, DEFAULT_TIMEOUT_S, MAX_SEEDS
from dogma_evolve.evolution.cli import output
from dogma_evolve.evolution.cli.progress import ablation_point_printer
from dogma_evolve.evolution.cli.tasks import import_stored_plugins, import_stored_tasks
from dogma_evolve.evolution.cli.training import add_training_options, check_training_options, train_run
from dogma_evolve.evolution.errors import UsageError


def add_ablate_command(sub: Any, common: argparse.ArgumentParser) -> None:
    ablate = sub.add_parser(
        "ablate",
        parents=[common],
        help="retrain an individual with each module removed or replaced; each change's effect",
        description="Retrain an individual (id or genome-id prefix) with each coding gene, edge, "
        "regulatory region and promoter copy removed, each dna path at its minimum, dna and "
        "tetra replaced by size-matched alternatives, on its run's tasks and budget under "
        "--seeds seeds; print each change's mean quality and its difference from the "
        "individual with a 95%% interval (paired by seed). Recorded as a run in the store: "
        "a second invocation trains only what is missing.",
    )
    ablate.add_argument("id", help="individual id or genome-id prefix")
    ablate.add_argument(
        "--seeds",
        type=int,
        default=DEFAULT_SEEDS,
        metavar="K",
        help=f"replicates of every variant (default {DEFAULT_SEEDS})",
    )
    ablate.add_argument(
        "--only",
        action="append",
        metavar="CHANGE",
        help="train only this change (repeatable; --list shows the names; a removal without its "
        "leading '-', e.g. --only gene:c1.T:mla, or --only=-gene:c1.T:mla; -> for →)",
    )
    ablate.add_argument("--list", action="store_true", help="list the changes and train nothing")
    add_training_options(ablate, DEFAULT_TIMEOUT_S)
    ablate.set_defaults(func=cmd_ablate)


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise UsageError(f"--seeds {args.seeds}: from 1 to {MAX_SEEDS}")
    check_training_options(args)


def plan_of(args: argparse.Namespace) -> Any:
    """The ablation plan of ID; every refusal is a one-line ``UsageError``, before anything
    is written (the store is opened to read)."""
    from dogma_evolve.evolution.ablate.ablation import AblateError, make_plan  # torch
    from dogma_evolve.evolution.report.summary import resolve_individual

    _check(args)
    opened = output.open_reader(args.store) if args.list else output.open_store(args.store)
    with opened as store:
        record = resolve_individual(store, args.id)
        run = store.get_run(record.run_id)
        if run is not None:  # its block kinds, imported with the code they were pinned to
            import_stored_plugins(run.config, f"ablating individual {record.id}")
        try:
            return make_plan(store, record, args.seeds, args.timeout, args.only or ())
        except AblateError as e:
            raise UsageError(str(e)) from None


def cmd_ablate(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.ablate.ablation import Recorder
    from dogma_evolve.evolution.ablate.stats import summary  # torch, as the ablation

    plan = plan_of(args)
    if args.list:
        return _list(args, plan)
    import_stored_tasks(plan.config.tasks, f"ablating individual {plan.individual}")
    err = output.err()
    started = time.perf_counter()
    with output.open_store(args.store) as store:
        recorder = Recorder(store, plan)
        todo = recorder.lookup()
        if not args.quiet:
            have = sum(p.status is not None for p in plan.points)
            err.print(
                f"ablate individual {plan.individual}: {len(plan.variants) - 1} changes + baseline × "
                f"{plan.seeds} seeds on {plan.config.task}, {plan.baseline.steps:,} steps; run "
                f"{recorder.run_id}{' (resumed)' if recorder.resumed else ''}: {have} of "
                f"{len(plan.points)} trainings stored, {len(todo)} to train"
            )
        printer = None if args.quiet else ablation_point_printer(err, plan, started)
        train_run(recorder, todo, lambda: _pool(args, store, recorder.run_id), printer)
        data = summary(plan)
    data["trained"] = len(todo)
    data["wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        output.emit_json(data)
    else:
        _print(data)
    return 0


def _pool(args: argparse.Namespace, store: Any, run_id: str) -> Any:
    """The Ray pool of `evolve run`, its leases logged to the ablation's run (tests replace it)."""
    from dogma_evolve.evolution.pools import ray_pool

    return ray_pool(store, run_id, args.workers, args.ray_address, args.timeout)


def _list(args: argparse.Namespace, plan: Any) -> int:
    rows = [{"change": v.name, "what": v.what, "params": v.params} for v in plan.variants[1:]]
    skipped = [{"change": c.name, "reason": c.reason} for c in plan.skipped]
    if args.json:
        output.emit_json({"changes": rows, "skipped": skipped})
        return 0
    out = output.out()
    for r in rows:
        out.print(f"{r['change']:<28} {r['params']:>10,}  {r['what']}")
    for s in skipped:
        out.print(f"{s['change']:<28} {'skipped':>10}  {s['reason']}")
    return 0


def _q(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _print(data: dict[str, Any]) -> None:
    out = output.out()
    if not out.is_terminal:  # a log or a pipe: the table's natural width, not 80 columns
        out.width = 160
    b = data["baseline"]
    table = Table(
        title=f"ablation of individual {data['individual']} ({data['genome_id'][:12]}) on {data['task']}, "
        f"{data['seeds']} seeds (run {data['run_id']})"
    )
    for col in ("change", "params", "mean", "delta [95% CI]", "n", "what"):
        table.add_column(col, justify="left" if col in ("change", "what") else "right")
    ci = b["ci"]
    table.add_row(
        "baseline",
        f"{b['params']:,}",
        _q(b["mean"]),
        "-" if ci is None else f"[{ci[0]:.4f}, {ci[1]:.4f}]",
        str(b["n"]),
        "the individual as evolved (interval: of the mean)",
    )
    for a in data["ablations"]:
        ci = a["ci"]
        delta = "-" if a["delta"] is None else f"{a['delta']:+.4f}"
        if ci is not None:
            delta += f" [{ci[0]:+.4f}, {ci[1]:+.4f}]"
        n = str(a["n"]) + (f" ({a['failed']} failed)" if a["failed"] else "")
        table.add_row(a["change"], f"{a['params']:,}", _q(a["mean"]), delta, n, a["what"])
    out.print(table)
    out.print(
        "delta = change − baseline, paired by seed (replicate k of every variant shares its seed and data "
        "order); 95% Student-t intervals"
    )
    qualities = " ".join(_q(q) for q in b["qualities"])
    out.print(
        f"baseline per seed: {qualities}; seed 0 is the search's own evaluation of the individual (an "
        "individual picked as a run's best was picked on that draw, so it tends to lie above the others)"
    )
    for s in data["skipped"]:
        out.print(f"skipped {s['change']}: {s['reason']}")
    out.print(f"{data['trained']} trainings in {data['wall_seconds']} s")
