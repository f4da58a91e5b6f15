"""The `evolve` command: parse, call library functions, print. Every command takes
`--store URL` and `--json`; bad input exits 2 with a one-line reason on stderr.

`COMMANDS` is the command table: each entry adds its subcommands to the parser (one
module per command group under `evolution.cli`). Building the parser imports no torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from dogma_evolve.evaluation.niceness import worker_niceness
from dogma_evolve.evolution.cli import preflight
from dogma_evolve.evolution.cli.ablate import add_ablate_command
from dogma_evolve.evolution.cli.calibrate import add_calibrate_command
from dogma_evolve.evolution.cli.check import add_check_command
from dogma_evolve.evolution.cli.genome import add_genome_command
from dogma_evolve.evolution.cli.inspect import add_inspect_commands
from dogma_evolve.evolution.cli.output import DEFAULT_STORE, EXIT_USAGE
from dogma_evolve.evolution.cli.plugin import add_plugin_command
from dogma_evolve.evolution.cli.replay import add_replay_command
from dogma_evolve.evolution.cli.run import add_run_command
from dogma_evolve.evolution.cli.scale import add_scale_command
from dogma_evolve.evolution.errors import UsageError
from dogma_evolve.genome import GenomeError

AddCommand = Callable[[Any, argparse.ArgumentParser], None]
#: the command table, in the order `evolve --help` lists the commands
COMMANDS: tuple[AddCommand, ...] = (
    add_run_command,
    add_inspect_commands,
    add_check_command,
    add_genome_command,
    add_replay_command,
    add_scale_command,
    add_ablate_command,
    add_calibrate_command,
    add_plugin_command,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command, from `COMMANDS` (each with `--store` and `--json`)."""
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
    for add in COMMANDS:
        add(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    foreign = preflight.check()
    if foreign is not None:  # a module of ours is someone else's file: nothing may start
        sys.stderr.write(f"evolve: error: {foreign}\n")
        return EXIT_USAGE
    try:
        worker_niceness()  # a mistyped EVOLVE_WORKER_NICENESS is refused before Ray starts
    except ValueError as e:
        sys.stderr.write(f"evolve: error: {e}\n")
        return EXIT_USAGE
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except Exception as e:
        store = sys.modules.get("dogma_evolve.store")  # a StoreError can only come from a loaded store
        environment = sys.modules.get("dogma_evolve.evaluation.environment")
        known = (UsageError, GenomeError) + ((store.StoreError,) if store else ())
        machine = (environment.EnvironmentFailure,) if environment else ()
        if not isinstance(e, known + machine):
            raise
        # `evolve run` says how to resume itself; scale, ablate and calibrate resume on a rerun
        then = "; fix the cause, then run the same command again" if isinstance(e, machine) else ""
        sys.stderr.write(f"evolve: error: {' '.join(str(e).split())}{then}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("evolve: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
