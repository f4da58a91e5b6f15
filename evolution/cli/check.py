"""The `evolve check` command: verify a store and report what it found in one table
(`store.check`): its schema revision, lineage, natural keys, open leases, run drivers and
artifact checksums.

It writes nothing unless `--release-stale` asks it to close the leases nobody watches and
release the runs of dead drivers. Exit 0 when every check is ok (or fixed), 1 when any
found a problem, 2 for a URL that holds no store (one line on stderr). The store opens
SQLAlchemy, so the handler imports it when it runs: every `evolve` command builds this
parser."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table
from rich.text import Text

from dogma_evolve.evolution.cli.output import emit_json, out

EXIT_PROBLEM = 1


def cmd_check(args: argparse.Namespace) -> int:
    from dogma_evolve.store.check import PROBLEM, check_url  # SQLAlchemy: when the handler runs
    from dogma_evolve.store.connection import describe

    findings = check_url(args.store, release_stale=args.release_stale)
    problems = sum(f.status == PROBLEM for f in findings)
    if args.json:
        emit_json(
            {
                "store": describe(args.store),
                "ok": not problems,
                "findings": [f.as_dict() for f in findings],
            }
        )
        return EXIT_PROBLEM if problems else 0
    table = Table(title=f"check of {describe(args.store)}")
    for column in ("check", "status", "count", "detail"):
        table.add_column(column, overflow="fold")
    for f in findings:
        table.add_row(f.check, f.status, str(f.count), Text(f.detail))
    console = out()
    console.print(table)
    if problems:
        console.print(f"{problems} of {len(findings)} checks found problems")
    return EXIT_PROBLEM if problems else 0


def add_check_command(sub: Any, common: argparse.ArgumentParser) -> None:
    check = sub.add_parser(
        "check",
        parents=[common],
        help="verify a store: schema, lineage, natural keys, leases, run drivers, artifacts",
        description="Verify the store and report each check in one table (status ok, problem or "
        "fixed, a count and the first offending ids). Neither creates nor migrates the store, and "
        "writes nothing unless --release-stale is given. Exit 0 when all is well, 1 on a problem.",
    )
    check.add_argument(
        "--release-stale",
        action="store_true",
        help="close the open leases nobody watches as expired and release the runs whose driver "
        "is dead (they can then be resumed)",
    )
    check.set_defaults(func=cmd_check)
