"""`evolve plugin check MODULE`: hold a user's block kinds to the contract the built-ins pass.

The plugin is loaded as a run would load it (`phenotype.plugins.load`: import, its kinds,
their genes' roles; a failure is one line, exit 2), then every kind it registers is checked
by `phenotype.contract.check_kind`, the function `tests/phenotype/test_blocks.py` runs over
the built-ins: one line per failed check (``plugin M: kind K: CHECK: detail``) and exit 1,
or one line per kind that passes and exit 0.
"""

from __future__ import annotations

import argparse
from typing import Any

from dogma_evolve.evolution.cli.output import emit_json, out
from dogma_evolve.evolution.errors import UsageError

#: the exit code of a plugin that loads but fails a check of the block contract
EXIT_FAILED = 1


def cmd_plugin_check(args: argparse.Namespace) -> int:
    from dogma_evolve.phenotype.contract import CHECKS, check_kind  # torch
    from dogma_evolve.phenotype.plugins import load

    try:
        record = load(args.module)
    except ValueError as e:
        raise UsageError(str(e)) from None
    results = {kind: check_kind(kind) for kind in record["kinds"]}
    if args.json:
        emit_json(
            {
                "plugin": record["pinned"],
                "code": record["code"],
                "kinds": {
                    kind: {
                        "role": record["genes"][kind]["role"],
                        "failed": {f.check: f.detail for f in failures},
                    }
                    for kind, failures in results.items()
                },
            }
        )
    else:
        console = out()
        for kind, failures in results.items():
            for failure in failures:
                console.print(f"plugin {record['module']}: kind {kind}: {failure}")
            if not failures:
                role = record["genes"][kind]["role"]
                console.print(
                    f"plugin {record['pinned']}: kind {kind} ({role}) passes {', '.join(CHECKS)}",
                )
    return EXIT_FAILED if any(results.values()) else 0


def add_plugin_command(sub: Any, common: argparse.ArgumentParser) -> None:
    plugin = sub.add_parser("plugin", help="a user's block kinds (docs/plugins.md)")
    commands = plugin.add_subparsers(dest="plugin_command", required=True)
    check = commands.add_parser(
        "check",
        parents=[common],
        help="check every kind a plugin registers against the block contract (causality, "
        "step == forward, accounting equal to the built module ...)",
    )
    check.add_argument(
        "module", help="MODULE (importable, or in the current directory) or an entry-point name"
    )
    check.set_defaults(func=cmd_plugin_check)
