"""`evolve run`: one search on the embedded defaults or the options given, `--resume` to
continue one, `--ladder` to take its elite up a size ladder, `--report` for a live HTML page.

The command holds its run while it works (`store.liveness`: `engine.liveness` around the
pool, the search and the ladder): a second `evolve run --resume` of the same run is refused
while this one is alive. Ctrl-C (SIGINT) stops it cleanly: the generation in flight is
either committed whole (one transaction) or discarded, the run stays `running` without a
driver (readers show it `interrupted`), one line names `evolve run --resume RUN`, and the
exit code is 130.

The options come from `RunConfig` (torch-free); the engine, the pool and the summaries load
torch (and Ray, and plotly for `--report`), so `cmd_run` imports them when it runs: every
`evolve` command builds this parser."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from evolution.cli.output import emit_json, err, open_store, out
from evolution.cli.tasks import import_stored_plugins, import_stored_tasks, say_imported, say_plugins
from evolution.config import RunConfig, cli_fields, switch
from evolution.errors import UsageError
from evolution.objectives import quality_of
from evolution.preflight import check_feasible
from evolution.progress import RunProgress, ladder_point_printer
from evolution.selection import pareto_front

if TYPE_CHECKING:
    from evaluation.protocol import Pool
    from evolution.engine import Engine
    from store import Store

# what --resume takes from the command line: how far and where it runs, and a ladder after it
RESUME_OVERRIDES: tuple[str, ...] = ("generations", "workers", "ray_address", "ladder", "target_params")
RESUME_OVERRIDES += ("ladder_sizes", "ladder_elites", "ladder_tokens", "timeout_s")
#: The exit code of a run stopped by Ctrl-C (SIGINT): 128 + 2, as a shell reports it.
EXIT_INTERRUPTED = 130
RUN_EPILOG = (
    "Ctrl-C stops a run cleanly: the generation in flight is committed whole or discarded "
    "(each generation is one transaction), the run is left 'interrupted' (shown so by evolve "
    "runs and evolve report; a run whose driver was killed is shown so once its heartbeat is "
    "a minute old) and `evolve run --resume RUN` continues it from its last committed "
    "generation. Exit code 130. A run another live evolve run drives cannot be resumed."
)


def run_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `RunConfig` fields given on the command line (the options built by `_add_run_options`)."""
    values = {f.name: getattr(args, f.name) for f, _, _ in cli_fields()}
    return {name: value for name, value in values.items() if value is not None}


def _pool_for(engine: Engine, store: Store) -> AbstractContextManager[Pool]:
    """The space's own in-process pool (a table look-up: no Ray), else Ray's pool."""
    local = engine.space.local_pool()
    if local is not None:
        return nullcontext(local)
    from evolution.pools import ray_pool

    config = engine.config
    return ray_pool(store, engine.run_id, config.workers, config.ray_address, config.timeout_s)


def cmd_run(args: argparse.Namespace) -> int:
    from evolution.engine import Engine, best_of  # torch, as the summaries
    from evolution.report.summary import individual_summary, run_transfer_summary
    from store.liveness import RunHeld

    overrides = run_overrides(args)
    try:
        config = RunConfig(**overrides)  # every check; on --resume too, for the flags given
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not args.resume:
        say_imported(config.task_code)  # a user's task was imported by RunConfig
        say_plugins(config.plugin_code)  # and a user's block kinds
        check_feasible(config)  # before the store or a run exists
    store = open_store(args.store, create=not (args.resume or config.memory_from))
    if args.resume:
        args.resume = store.resolve_run(args.resume)
        stored = store.get_run(args.resume)
        if stored is not None:  # its user tasks, imported with the code they were pinned to
            import_stored_tasks(stored.task.split(","), f"resuming run {stored.id}")
            import_stored_plugins(stored.config, f"resuming run {stored.id}")
    if config.memory_from:
        config = replace(config, memory_from=store.resolve_run(config.memory_from))
    progress = RunProgress(enabled=not args.quiet)
    with progress:
        if args.resume:
            config_overrides = {k: v for k, v in overrides.items() if k in RESUME_OVERRIDES}
            try:
                engine = Engine.resume(
                    args.resume, store, None, on_event=progress.on_event, **config_overrides
                )
            except KeyError as e:
                raise UsageError(str(e).strip("'\"")) from None
            except RunHeld as e:  # another evolve run drives it now
                raise UsageError(f"{e}: evolve run --resume {e.run_id} once it has stopped") from None
        else:
            try:
                engine = Engine(config, store, None, on_event=progress.on_event)
            except (KeyError, ValueError) as e:  # --memory-from: no such run, or another space's
                raise UsageError(str(e).strip("'\"")) from None
        progress.start(engine.run_id, engine.config)
        if args.report:  # the HTML report, rewritten after committed generations
            from evolution.report.html import live_report  # plotly (and torch): only --report draws

            engine.on_event = live_report(store, engine.run_id, args.report, engine.on_event)
        interrupted: str | None = None  # the run Ctrl-C stopped
        try:  # held (heartbeat) from here; released however the block ends
            with engine.liveness, _pool_for(engine, store) as pool:
                engine.pool = pool
                try:
                    population = engine.run()
                except KeyboardInterrupt:  # not a failure: --resume continues it
                    raise
                except BaseException:
                    store.set_run_status(engine.run_id, "failed")
                    raise
                if engine.config.ladder:  # the elite up a size ladder, on the same pool
                    _run_ladder(engine, store, population, pool, progress)
        except ConnectionError as e:  # e.g. --ray-address that nothing answers at
            raise UsageError(str(e)) from None
        except KeyboardInterrupt:
            interrupted = engine.run_id
    if interrupted is not None:
        return _interrupted(store, interrupted)
    if args.report:  # the final state (the run's status and stop reason too)
        from evolution.report.html import write_report  # plotly (and torch): only --report draws

        write_report(store, engine.run_id, args.report)
    # aging and local search let their best members die: best and front are drawn from every
    # child this invocation evaluated in full, besides the final population
    kept = {id(c) for c in population}
    seen = population + [c for _, c in engine.history if c.record.final and id(c) not in kept]
    best = best_of(seen)
    front = pareto_front(seen, floor=engine.config.quality_floor)
    run = store.get_run(engine.run_id)
    assert run is not None  # the engine created or resumed it
    result = {
        "run_id": engine.run_id,
        "best": individual_summary(best),
        "pareto": [individual_summary(i) for i in front],
        "generations": len(engine.reports),  # the generations this invocation ran
        "last_generation": run.last_generation,
        "stop_reason": engine.stop_reason,
        "evaluated": run.evaluated,
        "wall_seconds": round(progress.elapsed(), 1),
        **run_transfer_summary(store, engine),
    }
    if engine.config.ladder:
        from evolution.scale.ladder_report import ladder_summary  # torch

        result.update(ladder_summary(store, engine.run_id))
    if args.json:
        emit_json(result)
    else:
        _print_run_summary(result, front)
    return 0


def _interrupted(store: Store, run_id: str) -> int:
    """Ctrl-C: the run keeps what it committed; say how to continue it."""
    run = store.get_run(run_id)
    last = run.last_generation if run is not None else -1
    kept = f"generations 0..{last} are committed" if last >= 0 else "no generation was committed"
    err().print(
        f"evolve: interrupted: run {run_id} stopped ({kept}); continue it: evolve run --resume {run_id}"
    )
    return EXIT_INTERRUPTED


def _run_ladder(engine: Engine, store: Store, population: list[Any], pool: Pool, progress: Any) -> None:
    from evolution.scale.search_ladder import run_ladder  # torch

    run = store.get_run(engine.run_id)
    assert run is not None
    on_point = ladder_point_printer(progress.console, progress.t0) if progress.enabled else None
    run_ladder(store, engine.run_id, run.last_generation, population, engine.config, pool, on_point)


def _print_run_summary(result: dict[str, Any], front: list[Any]) -> None:
    console = out()
    table = Table(title=f"Pareto front of run {result['run_id']} (quality ↑, parameters ↓)")
    for col in ("id", "genome", "quality", "params", "sequence"):
        table.add_column(col, overflow="fold")
    for ind in front:
        table.add_row(
            str(ind.id),
            ind.genome.id[:12],
            f"{quality_of(ind.metrics):.3f}",
            f"{int(ind.metrics.get('params', 0)):,}",
            Text(ind.genome.sequence_view()),
        )
    console.print(table)
    best = result["best"]
    console.print(
        f"best: individual {best['id']} ({best['genome_id'][:12]}), quality "
        f"{quality_of(best['metrics']):.3f}, {int(best['metrics'].get('params', 0)):,} "
        f"parameters; {result['evaluated']} evaluations in {result['wall_seconds']} s"
    )
    per_task = best["metrics"].get("per_task") or {}
    if per_task:
        console.print("  per task: " + ", ".join(f"{t} {v:.3f}" for t, v in per_task.items()))
    if result.get("stop_reason"):
        console.print(f"stopped: {result['stop_reason']}")
    if result.get("transfer_warning"):
        console.print(result["transfer_warning"])
    if result.get("ladder"):
        from evolution.scale.ladder_report import ladder_lines  # torch

        for line in ladder_lines(result["ladder"], result["ladder_transfer"], result["ladder_warning"]):
            console.print(line)
    console.print(
        f"next: evolve audit {best['id']}   evolve export --run {result['run_id']} --best -o best-model"
    )


def add_run_command(sub: Any, common: argparse.ArgumentParser) -> None:
    """`evolve run`: one option per `RunConfig` field, `--resume`, `--quiet`, `--report`."""
    run = sub.add_parser("run", parents=[common], help="run an evolutionary search", epilog=RUN_EPILOG)
    _add_run_options(run)
    run.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="continue a run (id or prefix) from its last committed generation: one stopped by "
        "Ctrl-C, killed, or finished (with more --generations); refused while another driver holds it",
    )
    run.add_argument("--quiet", action="store_true", help="no progress display")
    run.add_argument("--report", metavar="FILE", help="HTML report of the run, rewritten as it runs")
    run.set_defaults(func=cmd_run)


def _add_run_options(run: argparse.ArgumentParser) -> None:
    """One option per `RunConfig` field with command-line metadata (`evolution.config`).
    No defaults here: an option not given leaves the field to the config (or, on
    --resume, to the stored run)."""
    for f, option, parse in cli_fields():
        flag = option.flag or "--" + f.name.replace("_", "-")
        metavar = option.metavar
        if metavar is None and option.flag and not option.choices:  # named after the flag
            metavar = option.flag.removeprefix("--").replace("-", "_").upper()
        if parse is switch:  # a flag: given means True, absent leaves the config's value
            run.add_argument(flag, dest=f.name, action="store_const", const=True, help=option.help)
            continue
        run.add_argument(
            flag, dest=f.name, type=parse, choices=option.choices, metavar=metavar, help=option.help
        )
