"""`evolve replay ID`: train an individual again and say whether its metrics match the
stored ones (`evolution.replay` has the logic); exit 1 on a mismatch."""

from __future__ import annotations

import argparse
from typing import Any

from dogma_evolve.evolution.cli.output import emit_json, open_reader, out
from dogma_evolve.evolution.cli.tasks import import_stored_plugins, import_stored_tasks
from dogma_evolve.evolution.replay import replay_individual

EXIT_MISMATCH = 1


def cmd_replay(args: argparse.Namespace) -> int:
    from dogma_evolve.evolution.report.summary import resolve_individual  # torch (phenotype's accounting)

    store = open_reader(args.store)  # read-only: a missing store is refused, not made
    try:
        record = resolve_individual(store, args.id)
        run = store.get_run(record.run_id)
        if run is not None:  # its block kinds, imported with the code they were pinned to
            import_stored_plugins(run.config, f"replaying individual {record.id}")
        if record.evaluation is not None:
            import_stored_tasks([record.evaluation.task], f"replaying individual {record.id}")
        report = replay_individual(store, record, threads=args.threads)
    finally:
        store.close()
    if args.json:
        emit_json(report)
    else:
        console = out()
        verdict = "match" if report["match"] else "MISMATCH"
        console.print(
            f"individual {report['id']} ({report['genome_id'][:12]}), {report['task']}, "
            f"{report['fidelity']} steps, seed {report['seed']}, "
            f"{report['torch_threads']} threads: {verdict}"
        )
        if report["stored_status"] != report["replayed_status"]:
            console.print(
                f"  status: stored {report['stored_status']}, replayed "
                f"{report['replayed_status']} {report['reason']}"
            )
        for key, c in report["metrics"].items():
            mark = "=" if c["equal"] else "≠"
            console.print(f"  {key:<20} {mark} stored {c['stored']!r}  replayed {c['replayed']!r}")
    return 0 if report["match"] else EXIT_MISMATCH


def add_replay_command(sub: Any, common: argparse.ArgumentParser) -> None:
    replay = sub.add_parser(
        "replay", parents=[common], help="re-train an individual and compare with its stored metrics"
    )
    replay.add_argument("id", help="individual id or genome-id prefix")
    replay.add_argument("--threads", type=int, help="torch threads (default: what the worker recorded)")
    replay.set_defaults(func=cmd_replay)
