"""The `evolve` command: parse, call library functions, print. Every command takes
`--store URL` and `--json`; bad input exits 2 with a one-line reason on stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from evolution.errors import UsageError
from genome import GenomeError

if TYPE_CHECKING:
    from evaluation.protocol import Pool
    from evolution.engine import Engine
    from store import Store

DEFAULT_STORE = "sqlite:///evolve.db"
EXIT_USAGE = 2
# what --resume takes from the command line: how far and where it runs, and a ladder after it
RESUME_OVERRIDES: tuple[str, ...] = ("generations", "workers", "ray_address", "ladder", "target_params")
RESUME_OVERRIDES += ("ladder_sizes", "ladder_elites", "ladder_tokens")


def _out() -> Console:
    # No markup: sequence views are full of brackets that rich would read as tags.
    return Console(highlight=False, soft_wrap=True, markup=False)


def _err() -> Console:
    return Console(stderr=True, highlight=False, markup=False)


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def _open_store(url: str, create: bool = False) -> Store:
    """The store at `url`; a reader (`create` False) refuses one that does not exist."""
    from store import Store  # imported on use: `genome validate` must answer fast

    return Store(url, create=create)


# -- evolve run ---------------------------------------------------------------------------
def _build_cpu_kernels() -> None:
    """Build (or load from cache) the C++ CPU kernels once in the driver, so that workers
    only load them: a first-ever build takes ~30 s and must not eat candidates' time limits."""
    import torch

    if not torch.cuda.is_available():
        from kernels.selective_scan import cpu

        cpu.available()


def run_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `RunConfig` fields given on the command line (the options built by `_add_run_options`)."""
    from evolution.config import cli_fields

    values = {f.name: getattr(args, f.name) for f, _, _ in cli_fields()}
    return {name: value for name, value in values.items() if value is not None}


def _pool_for(engine: Engine, store: Store) -> AbstractContextManager[Pool]:
    """The space's own in-process pool (a table look-up: no Ray), else Ray's pool."""
    local = engine.space.local_pool()
    if local is not None:
        return nullcontext(local)
    from evaluation import EvaluationPool
    from store import LeaseLog

    _build_cpu_kernels()
    return EvaluationPool(
        workers=engine.config.workers,
        ray_address=engine.config.ray_address,
        timeout_s=engine.config.timeout_s,
        on_lease=LeaseLog(store, engine.run_id),
    )


def cmd_run(args: argparse.Namespace) -> int:
    from evolution.config import RunConfig
    from evolution.engine import Engine, best_of
    from evolution.preflight import check_feasible
    from evolution.progress import RunProgress
    from evolution.selection import pareto_front
    from evolution.summary import individual_summary, run_transfer_summary

    overrides = run_overrides(args)
    try:
        config = RunConfig(**overrides)  # every check; on --resume too, for the flags given
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not args.resume:
        check_feasible(config)  # before the store or a run exists
    store = _open_store(args.store, create=not (args.resume or config.memory_from))
    if args.resume:
        args.resume = store.resolve_run(args.resume)
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
        else:
            try:
                engine = Engine(config, store, None, on_event=progress.on_event)
            except (KeyError, ValueError) as e:  # --memory-from: no such run, or another space's
                raise UsageError(str(e).strip("'\"")) from None
        progress.start(engine.run_id, engine.config)
        if args.report:  # the HTML report, rewritten after committed generations
            from evolution.report_html import live_report

            engine.on_event = live_report(store, engine.run_id, args.report, engine.on_event)
        try:
            with _pool_for(engine, store) as pool:
                engine.pool = pool
                try:
                    population = engine.run()
                except BaseException:
                    store.set_run_status(engine.run_id, "failed")
                    raise
                if engine.config.ladder:  # the elite up a size ladder, on the same pool
                    _run_ladder(engine, store, population, pool, progress)
        except ConnectionError as e:  # e.g. --ray-address that nothing answers at
            raise UsageError(str(e)) from None
    if args.report:  # the final state (the run's status and stop reason too)
        from evolution.report_html import write_report

        write_report(store, engine.run_id, args.report)
    best = best_of(population)
    front = pareto_front(population)
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
        from evolution.ladder_report import ladder_summary

        result.update(ladder_summary(store, engine.run_id))
    if args.json:
        _emit_json(result)
    else:
        _print_run_summary(result, front)
    return 0


def _run_ladder(engine: Engine, store: Store, population: list[Any], pool: Pool, progress: Any) -> None:
    from evolution.run_ladder import run_ladder
    from evolution.scale_cli import _progress

    run = store.get_run(engine.run_id)
    assert run is not None
    on_point = _progress(progress.console, progress.t0) if progress.enabled else None
    run_ladder(store, engine.run_id, run.last_generation, population, engine.config, pool, on_point)


def _print_run_summary(result: dict[str, Any], front: list[Any]) -> None:
    from evolution.evaluating import quality_of

    out = Console(highlight=False, markup=False)
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
    out.print(table)
    best = result["best"]
    out.print(
        f"best: individual {best['id']} ({best['genome_id'][:12]}), quality "
        f"{quality_of(best['metrics']):.3f}, {int(best['metrics'].get('params', 0)):,} "
        f"parameters; {result['evaluated']} evaluations in {result['wall_seconds']} s"
    )
    per_task = best["metrics"].get("per_task") or {}
    if per_task:
        out.print("  per task: " + ", ".join(f"{t} {v:.3f}" for t, v in per_task.items()))
    if result.get("stop_reason"):
        out.print(f"stopped: {result['stop_reason']}")
    if result.get("transfer_warning"):
        out.print(result["transfer_warning"])
    if result.get("ladder"):
        from evolution.ladder_report import ladder_lines

        for line in ladder_lines(result["ladder"], result["ladder_transfer"], result["ladder_warning"]):
            out.print(line)
    out.print(
        f"next: evolve audit {best['id']}   evolve export --run {result['run_id']} --best -o best-model"
    )


# -- evolve runs --------------------------------------------------------------------------
def cmd_runs(args: argparse.Namespace) -> int:
    from evolution.policy import top_operators

    store = _open_store(args.store)
    runs = [r for r in store.list_runs() if r.id.startswith(args.prefix or "")]
    if args.prefix and not runs:
        raise UsageError(f"no run {args.prefix!r:.70}")
    rows = [
        {
            "id": r.id,
            "status": r.status,
            "generations": r.generations,
            "evaluated": r.evaluated,
            "created": r.created.isoformat(timespec="seconds"),
            "task": r.task,
            "seed": r.seed,
            "strategy": r.config.get("strategy", r.config.get("kind", "nsga2")),  # scale, ablate: their kind
            "top_operators": top_operators(store.policy(r.id), 3),
        }
        for r in runs
    ]
    if args.json:
        _emit_json(rows)
        return 0
    table = Table(title="runs")
    for col in (
        "id",
        "status",
        "generations",
        "evaluated",
        "created",
        "task",
        "seed",
        "strategy",
        "top operators",
    ):
        table.add_column(col)
    for r in rows:
        top = ", ".join(f"{o['operator']} {o['rate']:.2f}" for o in r["top_operators"]) or "-"
        table.add_row(
            *(
                str(r[c])
                for c in ("id", "status", "generations", "evaluated", "created", "task", "seed", "strategy")
            ),
            top,
        )
    _out().print(table)
    return 0


# -- evolve audit / lineage ---------------------------------------------------------------
def cmd_audit(args: argparse.Namespace) -> int:
    from evolution.summary import audit_record, resolve_individual

    store = _open_store(args.store)
    record = resolve_individual(store, args.id)
    data = audit_record(store, record)
    if args.json:
        _emit_json(data)
        return 0
    out = _out()
    out.print(f"individual {data['id']} (run {data['run_id']}, generation {data['generation']})")
    out.print(f"genome    {data['genome_id']}")
    out.print(f"sequence  {data['sequence']}")
    out.print(f"operator  {data['operator'] or 'seed'}  change {json.dumps(data['change'])}")
    out.print(f"parents   {data['parents'] or '-'}")
    metrics = data["metrics"]
    if "quality" in metrics:
        out.print(f"quality   {metrics['quality']:.4f} (normalised accuracy: chance 0, perfect 1)")
    for task, value in (metrics.get("per_task") or {}).items():
        raw = (metrics.get("per_task_accuracy") or {}).get(task)
        out.print(f"  {task:<20} {value:.4f}" + (f"  (accuracy {raw:.4f})" if raw is not None else ""))
    out.print(f"metrics   {json.dumps(metrics, sort_keys=True)}")
    out.print(
        f"params {data['params']:,}  active {data['active_params']:,}  state bytes/token "
        f"{data['state_bytes_per_token']:,}  fixed {data['state_bytes_fixed']:,}"
    )
    out.print("regions:")
    for r in data["regions"]:
        out.print(f"  {r['id']:>6} {r['type']:<11} {r['summary']}")
    if data.get("ladder"):
        from evolution.ladder_report import loss_text

        out.print(f"ladder    rank {data['ladder']['rank'] or '-'}: {loss_text(data['ladder'])}")
    if data.get("operator_credit"):
        out.print("operator credit of the run (success rate, trials):")
        for o in data["operator_credit"]:
            out.print(f"  {o['operator']:<22} {o['rate']:.2f} ({o['trials']})")
    out.print("ancestry (back to the seeds):")
    for step in data["ancestry"]:
        change = "seed" if step["operator"] is None else f"{step['operator']} {json.dumps(step['change'])}"
        out.print(
            f"  {'  ' * step['depth']}#{step['id']} gen {step['generation']} "
            f"{step['genome_id'][:12]}  {change}"
        )
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from evolution.summary import audit_record, resolve_individual

    store = _open_store(args.store)
    data = audit_record(store, resolve_individual(store, args.id))["ancestry"]
    if args.json:
        _emit_json(data)
        return 0
    out = _out()
    for step in data:
        what = "seed" if step["operator"] is None else step["operator"]
        out.print(
            f"{'  ' * step['depth']}#{step['id']} gen {step['generation']} "
            f"{step['genome_id'][:12]} {what} <- {step['parents'] or '-'}"
        )
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from evolution.summary import genome_diff, resolve_individual
    from genome import Genome

    store = _open_store(args.store)
    a, b = (resolve_individual(store, key) for key in (args.a, args.b))
    changes = genome_diff(Genome.from_yaml(a.yaml), Genome.from_yaml(b.yaml))
    if args.json:
        _emit_json({"a": a.id, "b": b.id, "changes": changes})
        return 0
    out = _out()
    out.print(f"#{a.id} {a.sequence}\n#{b.id} {b.sequence}")
    for c in changes or [{"where": "-", "a": "identical", "b": "identical"}]:
        out.print(f"  {c['where']}: {c['a']} -> {c['b']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from evolution.summary import compute_cells, latest_run, report_lines, run_report

    store = _open_store(args.store)
    run_id = store.resolve_run(args.run) if args.run else latest_run(store)
    if args.html:  # the HTML report instead of the table
        from evolution.report_html import write_report

        info = {"run_id": run_id, "html": args.html, "bytes": write_report(store, run_id, args.html)}
        if args.json:
            _emit_json(info)
        else:
            _out().print(f"HTML report of run {run_id}: {args.html} ({info['bytes']:,} bytes)")
        return 0
    data = run_report(store, run_id)
    if args.json:
        _emit_json(data)
        return 0
    stopped = f"; {data['stop_reason']}" if data.get("stop_reason") else ""
    table = Table(title=f"run {run_id} ({data['status']}{stopped}, task {data['task']})")
    tasks = sorted({t for g in data["generations"] for t in g["best_per_task"]})
    columns = ("gen", "born", "evaluated", "failed", "best quality", "mean quality", "families")
    for col in (*columns, "tokens", "FLOPs", *tasks):
        table.add_column(col)
    for g in data["generations"]:
        table.add_row(
            str(g["generation"]),
            str(g["born"]),
            str(g["evaluated"]),
            str(g["failed"]),
            f"{g['best_quality']:.3f}",
            f"{g['mean_quality']:.3f}",
            str(g["families"]),
            *compute_cells(g["compute"]),
            *(f"{g['best_per_task'].get(t, 0.0):.2f}" for t in tasks),
        )
    out = _out()
    out.print(table)
    out.print("tokens, FLOPs: what the generation's real evaluations trained (cache hits are free)")
    if tasks:
        out.print("per-task columns: normalised accuracy of each generation's best individual")
    out.print(f"failures by type: {data['failures'] or 'none'}; operators: {data['operators']}")
    for line in report_lines(data):
        out.print(line)
    return 0


def cmd_blame(args: argparse.Namespace) -> int:
    from evolution.blame import blame_individual, labels
    from evolution.summary import resolve_individual

    store = _open_store(args.store)
    record = resolve_individual(store, args.id)
    data = blame_individual(store, record)
    if args.json:
        _emit_json(data)
        return 0
    what = labels(record)
    table = Table(
        title=f"blame of individual {record.id} (run {record.run_id}, generation {record.generation})"
    )
    for col in ("region", "base", "what", "individual", "gen", "operator", "change"):
        table.add_column(col, overflow="fold")
    for e in data["entries"]:
        where = (e["region"], e["base"])
        change = {k: v for k, v in (e["change"] or {}).items() if k != "op"}
        region, base = (e["region"], "-") if e["base"] is None else ("", str(e["base"]))
        table.add_row(
            region,
            base,
            Text(what.get(where, "")),
            f"#{e['individual']}",
            str(e["generation"]),
            e["operator"] or "seed",
            Text(json.dumps(change) if change else "-"),
        )
    _out().print(table)
    return 0


# -- evolve genome show / validate --------------------------------------------------------
# -- evolve export ------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    from evolution.export import export_individual
    from evolution.summary import best_individual, resolve_individual

    store = _open_store(args.store)
    run_id = store.resolve_run(args.run) if args.run else None
    record = best_individual(store, run_id) if args.best else resolve_individual(store, args.id, run_id)
    info = export_individual(store, record, args.output, progress=_err())
    if args.json:
        _emit_json(info)
    else:
        _out().print(f"exported individual {record.id} to {args.output}: {', '.join(info['files'])}")
    return 0


# -- parser -------------------------------------------------------------------------------
def _add_run_options(run: argparse.ArgumentParser) -> None:
    """One option per `RunConfig` field with command-line metadata (`evolution.config`).
    No defaults here: an option not given leaves the field to the config (or, on
    --resume, to the stored run)."""
    from evolution.config import cli_fields, switch

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


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=os.environ.get("EVOLVE_STORE", DEFAULT_STORE),
        help="SQLAlchemy URL of the store (default: sqlite:///evolve.db)",
    )
    common.add_argument("--json", action="store_true", help="one JSON document on stdout")

    parser = argparse.ArgumentParser(
        prog="evolve", description="Evolutionary architecture search over DOGMA genomes."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", parents=[common], help="run an evolutionary search")
    _add_run_options(run)
    run.add_argument(
        "--resume", metavar="RUN_ID", help="continue a run (id or prefix) from its last generation"
    )
    run.add_argument("--quiet", action="store_true", help="no progress display")
    run.add_argument("--report", metavar="FILE", help="HTML report of the run, rewritten as it runs")
    run.set_defaults(func=cmd_run)

    runs = sub.add_parser("runs", parents=[common], help="list runs")
    runs.add_argument("prefix", nargs="?", help="only the runs whose id starts with this")
    runs.set_defaults(func=cmd_runs)

    audit = sub.add_parser("audit", parents=[common], help="an individual and its ancestry")
    audit.add_argument("id", help="individual id or genome-id prefix")
    audit.set_defaults(func=cmd_audit)

    lineage = sub.add_parser("lineage", parents=[common], help="ancestry tree of an individual")
    lineage.add_argument("id", help="individual id or genome-id prefix")
    lineage.set_defaults(func=cmd_lineage)

    diff = sub.add_parser("diff", parents=[common], help="what differs between two individuals")
    diff.add_argument("a", help="individual id or genome-id prefix")
    diff.add_argument("b", help="individual id or genome-id prefix")
    diff.set_defaults(func=cmd_diff)

    blame = sub.add_parser("blame", parents=[common], help="who gave each region and base its form")
    blame.add_argument("id", help="individual id or genome-id prefix")
    blame.set_defaults(func=cmd_blame)

    report = sub.add_parser("report", parents=[common], help="per-generation summary of a run")
    report.add_argument("--run", help="run id or a prefix of one (default: the latest search)")
    report.add_argument("--html", metavar="FILE", help="write the self-contained HTML report instead")
    report.set_defaults(func=cmd_report)

    from evolution.genome_cli import add_genome_command

    add_genome_command(sub, common)

    export = sub.add_parser("export", parents=[common], help="export a trained phenotype")
    export.add_argument("--run", help="run id or a prefix of one (default: the latest search)")
    which = export.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the run's best individual")
    which.add_argument("--id", help="individual id or genome-id prefix")
    export.add_argument("-o", "--output", required=True, help="output directory")
    export.set_defaults(func=cmd_export)

    from evolution.replay import add_replay_command

    add_replay_command(sub, common)
    from evolution.scale_cli import add_scale_command

    add_scale_command(sub, common)
    from evolution.ablate_cli import add_ablate_command

    add_ablate_command(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except Exception as e:
        store = sys.modules.get("store")  # a StoreError can only come from a loaded store
        known = (UsageError, GenomeError) + ((store.StoreError,) if store else ())
        if not isinstance(e, known):
            raise
        sys.stderr.write(f"evolve: error: {' '.join(str(e).split())}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("evolve: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
