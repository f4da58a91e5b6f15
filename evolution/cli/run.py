"""`evolve run`: one search on the embedded defaults or the options given, `--resume` to
continue one, `--ladder` to take its elite up a size ladder, `--report` for a live HTML page.

A thin layer over the library (`evolution.study`): the options become `create_search`'s
settings (or `load_search`'s with `--resume`), `Search.optimize` runs the search (and the
ladder), and this module prints. The run is held while it works (`store.liveness`: the
engine's liveness around the pool, the search and the ladder): a second `evolve run
--resume` of the same run is refused while this one is alive. Ctrl-C (SIGINT) stops it
cleanly: the generation in flight is either committed whole (one transaction) or
discarded, the run stays `running` without a driver (readers show it `interrupted`), one
line names `evolve run --resume RUN`, and the exit code is 130. An evaluation that failed for
its environment on every attempt (`evaluation.environment`) stops it the same way, nothing of
its generation committed, with one line naming the cause and the resume, exit code 2.

The options come from `RunConfig` (torch-free); the engine, the pool and the summaries load
torch (and Ray, and plotly for `--report`), so `cmd_run` imports them when it runs: every
`evolve` command builds this parser."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from dogma_evolve.evolution.cli.interrupt import CtrlC
from dogma_evolve.evolution.cli.options import cli_fields, switch
from dogma_evolve.evolution.cli.output import EXIT_USAGE, emit_json, err, out
from dogma_evolve.evolution.cli.progress import (
    RunProgress,
    finalist_printer,
    ladder_point_printer,
    prior_results,
)
from dogma_evolve.evolution.cli.tasks import (
    import_stored_plugins,
    import_stored_tasks,
    say_imported,
    say_plugins,
)
from dogma_evolve.evolution.config import RunConfig
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.objectives import quality_of, seeds_text

if TYPE_CHECKING:
    from dogma_evolve.store import Store

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


def cmd_run(args: argparse.Namespace) -> int:
    """Parse, then the library (`evolution.study`: `create_search` or `load_search`, then
    `Search.optimize`), then print."""
    from dogma_evolve.evaluation.environment import EnvironmentFailure
    from dogma_evolve.evolution.preflight import check_text  # torch, as the library
    from dogma_evolve.evolution.report.summary import (  # torch, as the library
        best_individual,
        individual_summary,
        record_summary,
        run_transfer_summary,
    )
    from dogma_evolve.evolution.study import create_search, load_search
    from dogma_evolve.evolution.study.running import RESUME_OVERRIDES
    from dogma_evolve.store.liveness import RunHeld
    from dogma_evolve.store.outage import StoreFull

    overrides = run_overrides(args)
    if args.resume:
        try:
            RunConfig(**overrides)  # every check of the flags given
        except ValueError as e:
            raise UsageError(str(e)) from None
        given = {k: v for k, v in overrides.items() if k in RESUME_OVERRIDES}
        search = load_search(args.store, args.resume, **given)
        # its user tasks, imported with the code they were pinned to (and named on stderr)
        import_stored_tasks(search.run.task.split(","), f"resuming run {search.run_id}")
        import_stored_plugins(search.run.config, f"resuming run {search.run_id}")  # and block kinds
        check_text(search.config, search.stored.space)  # its ladder options anew: before the display
    else:
        search = create_search(args.store, **overrides)  # every check, before a run exists
        say_imported(search.config.task_code)  # a user's task was imported by RunConfig
        say_plugins(search.config.plugin_code)  # and a user's block kinds
    store = search.store
    progress = RunProgress(enabled=not args.quiet)
    ctrl_c = CtrlC()
    on_event = progress.on_event
    if args.report:  # the HTML report, rewritten after committed generations
        from dogma_evolve.evolution.report.html import live_report  # plotly (and torch): only --report draws

        on_event = live_report(store, search.run_id, args.report, progress.on_event)

    def checked(kind: str, data: dict[str, Any]) -> None:  # a Ctrl-C a finaliser swallowed
        ctrl_c.check()
        on_event(kind, data)

    search.on_event = checked
    if progress.enabled:
        search.on_ladder_point = ladder_point_printer(progress.console, progress.t0)
        search.on_finalist = finalist_printer(progress.console, progress.t0)
    evaluated_before = search.run.evaluated  # what this invocation adds: `invocation_evaluated`
    interrupted = False
    failure: EnvironmentFailure | None = None
    full: StoreFull | None = None
    with progress, ctrl_c:
        # the run's config, read once (`StoredRun`); resumed, what its display showed so far
        joint = search.config.task if len(search.config.tasks) > 1 else None
        prior = prior_results(search.evaluations(), joint) if args.resume else (0.0, 0)
        progress.start(search.run_id, search.config, prior)
        try:
            search.optimize()
        except RunHeld as e:  # another evolve run drives it now
            raise UsageError(f"{e}: evolve run --resume {e.run_id} once it has stopped") from None
        except KeyboardInterrupt:  # not a failure: --resume continues it
            interrupted = True
        except EnvironmentFailure as e:  # the machine's fault: nothing stored about the genome
            failure = e
        except StoreFull as e:  # the generation rolled back whole: resumable once space is freed
            full = e
    if failure is not None:  # one line, after the progress display has closed
        sys.stderr.write(
            f"evolve: error: {' '.join(str(failure).split())}; fix the cause, then: "
            f"evolve run --resume {search.run_id}\n"
        )
        return EXIT_USAGE
    if full is not None:
        line = " ".join(str(full).split())
        sys.stderr.write(f"evolve: error: {line}: evolve run --resume {search.run_id}\n")
        return EXIT_USAGE
    if interrupted:
        return _interrupted(store, search.run_id)
    engine = search.engine
    assert engine is not None  # optimize ran it
    run_id = search.run_id
    if args.report:  # the final state (the run's status and stop reason too)
        from dogma_evolve.evolution.report.html import write_report  # plotly (and torch): only --report draws

        write_report(store, run_id, args.report)
    # Everything but `invocation_*` and `wall_seconds` is the stored run's, read by the rules every
    # reader shares (`StoredRun.best`/`front`: `report`, `export --best`, `Search.best_individual`/
    # `pareto_front`, the HTML page), so a resumed run prints what the uninterrupted one does.
    stored, run = search.stored, search.run
    result = {
        "run_id": run_id,
        "best": record_summary(best_individual(store, run_id, stored), stored.space),
        "selected_by": selected_by(store, stored),
        "pareto": [individual_summary(i) for i in stored.front()],
        "last_generation": run.last_generation,
        "stop_reason": run.stop_reason,
        "evaluated": run.evaluated,
        "invocation_generations": len(engine.reports),  # this command's share of the run
        "invocation_evaluated": run.evaluated - evaluated_before,
        "wall_seconds": round(progress.elapsed(), 1),
        **run_transfer_summary(stored),
    }
    if stored.config.ladder:
        from dogma_evolve.evolution.scale.ladder_report import ladder_summary  # torch

        result.update(ladder_summary(store, run_id))
    if stored.stored_config.get("select_by") == "long":
        from dogma_evolve.evolution.study.finalists import finalist_results

        result["finalists"] = finalist_results(stored)
    if args.json:
        emit_json(result)
    else:
        _print_run_summary(result)
    return 0


def selected_by(store: Store, stored: Any) -> str:
    """What named the run's best: ``ladder`` (its rank 1), ``long`` (the best finalist after
    the long trainings, `study.finalists`) or ``search`` (the search's own best: the rule,
    or the fallback while the ladder or the finalists have not ranked)."""
    from dogma_evolve.evolution.report.summary import ladder_choice

    if ladder_choice(store, stored.run_id) is not None:
        return "ladder"
    if stored.stored_config.get("select_by") == "long":
        from dogma_evolve.evolution.study.finalists import long_choice_id

        return "long" if long_choice_id(stored) is not None else "search"
    return "search"


def _interrupted(store: Store, run_id: str) -> int:
    """Ctrl-C: the run keeps what it committed; say how to continue it."""
    run = store.get_run(run_id)
    last = run.last_generation if run is not None else -1
    kept = f"generations 0..{last} are committed" if last >= 0 else "no generation was committed"
    err().print(
        f"evolve: interrupted: run {run_id} stopped ({kept}); continue it: evolve run --resume {run_id}"
    )
    return EXIT_INTERRUPTED


def _print_run_summary(result: dict[str, Any]) -> None:
    """The run's front and best as `--json` gives them (`result`), then this invocation's share."""
    console = out()
    table = Table(title=f"Pareto front of run {result['run_id']} (quality ↑, parameters ↓)")
    for col in ("id", "genome", "quality", "params", "sequence"):
        table.add_column(col, overflow="fold")
    for ind in result["pareto"]:
        table.add_row(
            str(ind["id"]),
            ind["genome_id"][:12],
            f"{quality_of(ind['metrics']):.3f}",
            f"{int(ind['metrics'].get('params', 0)):,}",
            Text(ind["sequence"]),
        )
    console.print(table)
    best = result["best"]
    for f in result.get("finalists", []):
        after = f"{f['quality']:.3f}" if f["quality"] is not None else str(f["status"])
        console.print(
            f"finalist: individual {f['individual_id']} ({f['genome_id'][:12]}), quality "
            f"{f['search_quality']:.3f} in the search, {after} after {f['steps']:,} steps"
        )
    chosen = {
        "ladder": " (rank 1 of the ladder, --select-by ladder)",
        "long": " (the best finalist after the long trainings, --select-by long)",
    }.get(result.get("selected_by", ""), "")
    console.print(
        f"best{chosen}: individual {best['id']} ({best['genome_id'][:12]}), quality "
        f"{quality_of(best['metrics']):.3f}{seeds_text(best['metrics'])}, "
        f"{int(best['metrics'].get('params', 0)):,} parameters"
    )
    per_task = best["metrics"].get("per_task") or {}
    if per_task:
        console.print("  per task: " + ", ".join(f"{t} {v:.3f}" for t, v in per_task.items()))
    console.print(
        f"run: {result['evaluated']} evaluations, generations 0..{result['last_generation']}; this "
        f"invocation: {result['invocation_generations']} generations, {result['invocation_evaluated']} "
        f"evaluations in {result['wall_seconds']} s"
    )
    if result.get("stop_reason"):
        console.print(f"stopped: {result['stop_reason']}")
    if result.get("transfer_warning"):
        console.print(result["transfer_warning"])
    if result.get("ladder"):
        from dogma_evolve.evolution.scale.ladder_report import ladder_lines  # torch

        for line in ladder_lines(
            result["ladder"],
            result["ladder_transfer"],
            result["ladder_warning"],
            result.get("ladder_regime"),
            result.get("ladder_verdict"),
        ):
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
