"""The commands that read a store: `evolve runs|audit|lineage|diff|report|blame|export`.

None imports a user task's code but `export`, which runs it (`evolution.cli.tasks`).

What they read through (`evolution.report.summary`, which accounts genomes with
`phenotype`, and `evolution.export`) loads torch, the HTML report plotly too, and the store
SQLAlchemy: each handler imports what it uses when it runs, since every `evolve` command
builds this parser."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table
from rich.text import Text

from dogma_evolve.evolution.cli.output import emit_json, err, one_line, open_reader, out
from dogma_evolve.evolution.cli.tasks import import_stored_plugins, import_stored_tasks
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.evolution.report.blame import blame_individual, labels, space_of
from dogma_evolve.genome import Genome


# -- evolve runs --------------------------------------------------------------------------
def resume_hint(run_id: str, kind: str, shown_status: str) -> str | None:
    """How to continue a run shown ``interrupted`` (its driver stopped or was killed before
    it finished); None for any other run. A search resumes with ``evolve run --resume``; the
    training runs of scale / ablate / calibrate resume by running their command again."""
    from dogma_evolve.store.liveness import INTERRUPTED  # SQLAlchemy: when a handler runs

    if shown_status != INTERRUPTED:
        return None
    if kind == "search":
        return f"evolve run --resume {run_id}"
    return f"the same evolve {kind} command again (it resumes run {run_id})"


def _run_rows(store: Any, prefix: str) -> list[dict[str, Any]]:
    """What `evolve runs` shows of each run whose id starts with ``prefix``."""
    from dogma_evolve.evolution.policy import top_operators  # SQLAlchemy (the store's policy rows)

    return [
        {
            "id": r.id,
            "kind": r.kind,
            "status": r.shown_status,  # `interrupted`: running, but nobody drives it
            "resume": resume_hint(r.id, r.kind, r.shown_status),
            "generations": r.generations,
            "evaluated": r.evaluated,
            "created": r.created.isoformat(timespec="seconds"),
            "task": r.task,
            "seed": r.seed,
            "strategy": r.config.get("strategy", "nsga2") if r.kind == "search" else r.kind,
            "top_operators": top_operators(store.policy(r.id), 3),
        }
        for r in store.list_runs()
        if r.id.startswith(prefix)
    ]


def cmd_runs(args: argparse.Namespace) -> int:
    with open_reader(args.store) as store:
        rows = _run_rows(store, args.prefix or "")
    if args.prefix and not rows:
        raise UsageError(f"no run {args.prefix!r:.70}")
    if args.json:
        emit_json(rows)
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
    console = out()
    console.print(table)
    for r in rows:
        if r["resume"]:
            console.print(
                f"run {r['id']} is interrupted (its driver stopped before it finished): {r['resume']}"
            )
    return 0


# -- evolve audit / lineage ---------------------------------------------------------------
def cmd_audit(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.report.summary import audit_record, resolve_individual  # torch

    with open_reader(args.store) as store:
        data = audit_record(store, resolve_individual(store, args.id))
    if args.json:
        emit_json(data)
        return 0
    console = out()
    console.print(f"individual {data['id']} (run {data['run_id']}, generation {data['generation']})")
    console.print(f"genome    {data['genome_id']}")
    console.print(f"sequence  {data['sequence']}")
    console.print(f"operator  {data['operator'] or 'seed'}  change {one_line(data['change'])}")
    console.print(f"parents   {data['parents'] or '-'}")
    metrics = data["metrics"]
    if "quality" in metrics:
        console.print(f"quality   {metrics['quality']:.4f} (normalised accuracy: chance 0, perfect 1)")
    for task, value in (metrics.get("per_task") or {}).items():
        raw = (metrics.get("per_task_accuracy") or {}).get(task)
        console.print(f"  {task:<20} {value:.4f}" + (f"  (accuracy {raw:.4f})" if raw is not None else ""))
    console.print(f"metrics   {one_line(metrics, sort_keys=True)}")
    console.print(
        f"params {data['params']:,}  active {data['active_params']:,}  state bytes/token "
        f"{data['state_bytes_per_token']:,}  fixed {data['state_bytes_fixed']:,}"
    )
    console.print("regions:")
    for r in data["regions"]:
        console.print(f"  {r['id']:>6} {r['type']:<11} {r['summary']}")
    if data.get("ladder"):
        from dogma_evolve.evolution.scale.ladder_report import loss_text  # torch

        console.print(f"ladder    rank {data['ladder']['rank'] or '-'}: {loss_text(data['ladder'])}")
    if data.get("operator_credit"):
        console.print("operator credit of the run (success rate, trials):")
        for o in data["operator_credit"]:
            console.print(f"  {o['operator']:<22} {o['rate']:.2f} ({o['trials']})")
    console.print("ancestry (back to the seeds):")
    for step in data["ancestry"]:
        change = "seed" if step["operator"] is None else f"{step['operator']} {one_line(step['change'])}"
        console.print(
            f"  {'  ' * step['depth']}#{step['id']} gen {step['generation']} "
            f"{step['genome_id'][:12]}  {change}"
        )
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.report.summary import audit_record, resolve_individual  # torch

    with open_reader(args.store) as store:
        data = audit_record(store, resolve_individual(store, args.id))["ancestry"]
    if args.json:
        emit_json(data)
        return 0
    console = out()
    for step in data:
        what = "seed" if step["operator"] is None else step["operator"]
        console.print(
            f"{'  ' * step['depth']}#{step['id']} gen {step['generation']} "
            f"{step['genome_id'][:12]} {what} <- {step['parents'] or '-'}"
        )
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.report.summary import genome_diff, resolve_individual  # torch

    with open_reader(args.store) as store:
        a, b = (resolve_individual(store, key) for key in (args.a, args.b))
    changes = genome_diff(Genome.from_yaml(a.yaml), Genome.from_yaml(b.yaml))
    if args.json:
        emit_json({"a": a.id, "b": b.id, "changes": changes})
        return 0
    console = out()
    console.print(f"#{a.id} {a.sequence}\n#{b.id} {b.sequence}")
    for c in changes or [{"where": "-", "a": "identical", "b": "identical"}]:
        console.print(f"  {c['where']}: {c['a']} -> {c['b']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    with open_reader(args.store) as store:
        return _report(store, args)


def _report(store: Any, args: argparse.Namespace) -> int:
    """`evolve report` of the store open for it."""
    from dogma_evolve.evolution.report.summary import (  # torch
        compute_cells,
        environment_text,
        latest_run,
        report_lines,
        run_report,
    )

    run_id = store.resolve_run(args.run) if args.run else latest_run(store)
    from dogma_evolve.evolution.calibrate.calibration import stored_summary
    from dogma_evolve.evolution.calibrate.table import calibration_lines

    calibration = stored_summary(store, run_id)
    if calibration is not None:  # a calibration run: its table, not a search's
        if args.html:
            from dogma_evolve.evolution.report.html_calibration import write_calibration_report  # plotly

            size = write_calibration_report(calibration, args.html)
            info = {"run_id": run_id, "html": args.html, "bytes": size}
            if args.json:
                emit_json(info)
            else:
                out().print(f"HTML report of calibration {run_id}: {args.html} ({size:,} bytes)")
        elif args.json:
            emit_json(calibration)
        else:
            for line in calibration_lines(calibration):
                out().print(line)
        return 0
    if args.html:  # the HTML report instead of the table
        from dogma_evolve.evolution.report.html import write_report  # plotly (and torch)

        info = {"run_id": run_id, "html": args.html, "bytes": write_report(store, run_id, args.html)}
        if args.json:
            emit_json(info)
        else:
            out().print(f"HTML report of run {run_id}: {args.html} ({info['bytes']:,} bytes)")
        return 0
    data = run_report(store, run_id)
    record = store.get_run(run_id)
    data["resume"] = None if record is None else resume_hint(run_id, record.kind, data["status"])
    if args.json:
        emit_json(data)
        return 0
    stopped = f"; {data['stop_reason']}" if data.get("stop_reason") else ""
    table = Table(title=f"run {run_id} ({data['status']}{stopped}, task {data['task']})")
    tasks = sorted({t for g in data["generations"] for t in g["best_per_task"]})
    columns = ("gen", "born", "evaluated", "filtered", "failed", "best quality", "mean quality", "families")
    for col in (*columns, "tokens", "FLOPs", *tasks):
        table.add_column(col)
    for g in data["generations"]:
        table.add_row(
            str(g["generation"]),
            str(g["born"]),
            str(g["evaluated"]),
            str(g.get("filtered", 0)),
            str(g["failed"]),
            f"{g['best_quality']:.3f}",
            f"{g['mean_quality']:.3f}",
            str(g["families"]),
            *compute_cells(g["compute"]),
            *(f"{g['best_per_task'].get(t, 0.0):.2f}" for t in tasks),
        )
    console = out()
    console.print(table)
    console.print("tokens, FLOPs: what the generation's real evaluations trained (cache hits are free)")
    if tasks:
        console.print("per-task columns: normalised accuracy of each generation's best individual")
    _print_ledger(data["ledger"])
    console.print(f"genome failures by type: {data['failures'] or 'none'}; operators: {data['operators']}")
    console.print(environment_text(data["environment_failures"]))
    for line in report_lines(data):
        console.print(line)
    if data["resume"]:
        console.print(f"interrupted: its driver stopped before it finished; continue it: {data['resume']}")
    return 0


def _print_ledger(ledger: dict[str, Any]) -> None:
    """`evolve report`'s training ledger (`evolution.report.ledger`), a table and its notes."""
    from dogma_evolve.evolution.report.ledger import LEDGER_COLUMNS, ledger_cells, ledger_notes

    if not ledger["measured"]:  # a table space: look-ups, nothing trained
        return
    table = Table(title="training ledger")
    for col in LEDGER_COLUMNS:
        table.add_column(col)
    for row in (*ledger["generations"], ledger["total"]):
        table.add_row(*ledger_cells(row))
    out().print(table)
    for line in ledger_notes(ledger):
        out().print(line)


def cmd_blame(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.report.summary import resolve_individual  # torch

    with open_reader(args.store) as store:
        record = resolve_individual(store, args.id)
        data = blame_individual(store, record)
        space = space_of(store, record)
    if args.json:
        emit_json(data)
        return 0
    what = labels(record, space)
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
            Text(one_line(change) if change else "-"),
        )
    out().print(table)
    return 0


# -- evolve export ------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.export import export_individual  # torch
    from dogma_evolve.evolution.report.summary import best_individual, resolve_individual
    from dogma_evolve.phenotype.standalone.writer import StandaloneError

    if args.format == "hf":
        from dogma_evolve.evolution.export.hf import require_transformers

        require_transformers()  # before the store is read
    with open_reader(args.store) as store:
        run_id = store.resolve_run(args.run) if args.run else None
        record = best_individual(store, run_id) if args.best else resolve_individual(store, args.id, run_id)
        run = store.get_run(record.run_id)
        if run is not None:  # its block kinds, imported with the code they were pinned to
            import_stored_plugins(run.config, f"exporting individual {record.id}")
        if record.evaluation is not None:  # its example batch (and a replay) runs the task's code
            import_stored_tasks([record.evaluation.task], f"exporting individual {record.id}")
        try:
            info = export_individual(store, record, args.output, progress=err(), fmt=args.format)
        except StandaloneError as e:  # code the package cannot carry (a plugin's, say)
            raise UsageError(f"cannot export individual {record.id}: {e}") from None
    if args.json:
        emit_json(info)
    else:
        out().print(f"exported individual {record.id} to {args.output}: {', '.join(info['files'])}")
    return 0


def add_inspect_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """The readers: runs, audit, lineage, diff, blame, report, export."""
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

    export = sub.add_parser("export", parents=[common], help="export a trained phenotype")
    export.add_argument("--run", help="run id or a prefix of one (default: the latest search)")
    which = export.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the run's best individual")
    which.add_argument("--id", help="individual id or genome-id prefix")
    export.add_argument("-o", "--output", required=True, help="output directory")
    export.add_argument(
        "--format",
        choices=("standalone", "hf"),
        default="standalone",
        help="standalone: torch.export program and a torch-only package (default); "
        "hf: a transformers directory (trust_remote_code), needs the hf extra",
    )
    export.set_defaults(func=cmd_export)
