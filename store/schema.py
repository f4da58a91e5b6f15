"""Opening a store: bring its schema to the newest migration, once, whoever else opens it.

The common case (the store is at head) is one read, so opening a store in use by a
running driver takes no write lock. Otherwise the Alembic revisions of
:mod:`store.migrations` run in one write transaction that has the store to itself
(:func:`migration_connection`): ``BEGIN IMMEDIATE`` on SQLite, a transaction-scoped
advisory lock on PostgreSQL. DDL is transactional on both, so a store is either upgraded
whole or not at all, and a second process opening it at the same moment waits, then
finds it at head and changes nothing.

A store at a revision this program does not know was written by a newer program: it is
refused and left untouched.

A reader (:func:`require_head`, for a store opened read-only) never upgrades: a store at an
older revision is refused, untouched, with the command that upgrades it
(:func:`upgrade_command`). The ORM models map the head's columns, so reading an older schema
as it is would fail on the first column it lacks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, func, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

import dogma_evolve.store.transactions as transactions
from dogma_evolve.store.connection import Engines, describe
from dogma_evolve.store.records import StoreError

# Alembic is imported when a store is opened, not with the package: `import store` stays as
# fast as SQLAlchemy alone for commands that never open one.

# Any 64-bit constant: the PostgreSQL advisory lock that serialises schema changes.
_SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"dogma-evolve schema").digest()[:8], "big") >> 1


def upgrade_to_head(engines: Engines, *, create: bool = True) -> None:
    """Create or upgrade the store's tables to the newest revision (see the module doc).

    With ``create=False`` (a reader) a database without the store's tables is refused,
    untouched, instead of becoming a new, empty store."""
    stored = transactions.read(engines.read, _stored_revisions, "reading the schema revision")
    if _at_head(stored):
        return
    if not create and not stored and not transactions.read(engines.read, _has_runs, "reading the tables"):
        raise StoreError("it holds no evolve store (no runs table); nothing was created")
    transactions.retrying(lambda: _upgrade(engines.write), "creating or upgrading tables")


def require_head(engines: Engines, url: str) -> None:
    """Refuse, untouched, a store a reader cannot read: one without the store's tables, one
    at a revision newer than this program's, or one at an older revision (the message names
    :func:`upgrade_command`). Reads only, through ``engines.read``."""
    stored, has_runs = transactions.read(engines.read, revision_and_runs, "reading the schema revision")
    if _at_head(stored):
        return
    if not stored and not has_runs:
        raise StoreError("it holds no evolve store (no runs table); nothing was created")
    import dogma_evolve.store.migrations as migrations

    revision = f"revision {', '.join(stored)}" if stored else "release 0.1's (no Alembic revision)"
    raise StoreError(
        f"its schema is at {revision}, older than this program's {', '.join(sorted(migrations.heads()))}, "
        f"and a command that only reads never upgrades it; upgrade it with {upgrade_command(url)} "
        "(or run a command that writes to it, such as evolve run --resume RUN)"
    )


def upgrade_command(url: str) -> str:
    """The command line that brings the store at ``url`` to the newest revision (the
    password, if any, hidden)."""
    return f"`python -m dogma_evolve.store.migrations --url '{describe(url)}' upgrade head`"


def stored_revisions(connection: Connection) -> tuple[str, ...]:
    """The revisions recorded in ``alembic_version`` (none for a new or pre-Alembic store)."""
    from alembic.runtime.migration import MigrationContext

    return tuple(MigrationContext.configure(connection).get_current_heads())


def revision_and_runs(session: Session) -> tuple[tuple[str, ...], bool]:
    """The stored revisions and whether the ``runs`` table exists, read in one snapshot: a
    store being created beside the reader is then either absent or whole, never a runs
    table without its revision (a store of release 0.1)."""
    connection = session.connection()
    return stored_revisions(connection), inspect(connection).has_table("runs")


def _stored_revisions(session: Session) -> tuple[str, ...]:
    return stored_revisions(session.connection())


def _has_runs(session: Session) -> bool:
    return inspect(session.connection()).has_table("runs")


def _at_head(stored: tuple[str, ...]) -> bool:
    import dogma_evolve.store.migrations as migrations

    unknown = sorted(revision for revision in stored if not migrations.known(revision))
    if unknown:
        raise StoreError(
            f"the store has schema revision {unknown[0]}, newer than this program's "
            f"{', '.join(sorted(migrations.heads()))}; upgrade dogma-evolve to use it"
        )
    return set(stored) == migrations.heads()


def _upgrade(engine: Engine) -> None:
    from alembic import command
    from alembic.util import CommandError

    import dogma_evolve.store.migrations as migrations

    with migration_connection(engine) as connection:
        if _at_head(stored_revisions(connection)):
            return  # another process upgraded it while we waited for the lock
        try:
            command.upgrade(migrations.config(connection), "head")
        except CommandError as exc:
            raise StoreError(f"migrating the schema: {exc}") from exc


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside a write transaction that has the store to itself.

    On SQLite the transaction is ``BEGIN IMMEDIATE`` (the write engine's), with foreign
    keys off while it lasts: a migration that alters a table copies it, drops the old
    one and renames the copy, which enforced foreign keys would refuse. They are checked
    (``PRAGMA foreign_key_check``) before the commit and turned on again after it. On
    PostgreSQL an advisory lock is taken for the transaction.
    """
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            _sqlite_foreign_keys(connection, on=False)
        try:
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    connection.execute(select(func.pg_advisory_xact_lock(_SCHEMA_LOCK_KEY)))
                yield connection
                if sqlite:
                    _check_foreign_keys(connection)
        finally:
            if sqlite:
                _sqlite_foreign_keys(connection, on=True)


def _sqlite_foreign_keys(connection: Connection, *, on: bool) -> None:
    """Set SQLite's foreign-key enforcement; only possible outside a transaction, so it is
    set on the driver's connection, before SQLAlchemy begins one."""
    driver = connection.connection.driver_connection if not connection.invalidated else None
    if driver is None:
        return  # a broken connection is discarded by the pool, not reused
    driver.execute(f"PRAGMA foreign_keys = {'ON' if on else 'OFF'}")


def _check_foreign_keys(connection: Connection) -> None:
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        table, rowid, parent, _ = broken[0]
        raise StoreError(
            f"a migration left {len(broken)} rows with a dangling foreign key "
            f"(first: {table} row {rowid} -> {parent}); nothing was changed"
        )
