"""``python -m dogma_evolve.store.migrations [--url URL] COMMAND ...``: Alembic's command line for the store.

The commands and options are Alembic's own (``revision``, ``upgrade``, ``downgrade``,
``current``, ``history``, ``heads``, ``check``, ...), with the configuration of
:func:`store.migrations.config` instead of an ``alembic.ini``. With ``--url`` the command
runs on that store inside :func:`store.schema.migration_connection` (its locks and SQLite
settings), and the transaction commits when the command succeeds. See the package
docstring for how to add a migration.
"""

from __future__ import annotations

import logging
import sys

from alembic.config import CommandLine
from alembic.util import CommandError
from sqlalchemy.exc import SQLAlchemyError

import dogma_evolve.store.migrations as migrations
from dogma_evolve.store.connection import describe, open_engines
from dogma_evolve.store.records import StoreError
from dogma_evolve.store.schema import migration_connection


def main(argv: list[str] | None = None) -> int:
    cli = CommandLine(prog="python -m dogma_evolve.store.migrations")
    cli.parser.add_argument("--url", help="SQLAlchemy URL of the store the command works on")
    options = cli.parser.parse_args(argv)
    if not hasattr(options, "cmd"):
        cli.parser.error("too few arguments")
    traceback, options.raiseerr = options.raiseerr, True  # errors come here, not sys.exit
    if not options.quiet:  # Alembic reports each revision it runs through logging
        logging.basicConfig(format="%(message)s")
        logging.getLogger("alembic.runtime.migration").setLevel(logging.INFO)
    try:
        if options.url is None:
            cli.run_cmd(migrations.config(), options)
            return 0
        engines = open_engines(options.url)
        try:
            with migration_connection(engines.write) as connection:
                cli.run_cmd(migrations.config(connection), options)
        finally:
            engines.dispose()
    except (CommandError, StoreError, SQLAlchemyError) as exc:
        if traceback:
            raise
        print(f"{describe(options.url)}: {exc}" if options.url else str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
