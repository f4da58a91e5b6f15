"""Alembic environment of the store: run the revisions on the connection the caller gives.

Alembic loads this file for every command that touches a database. The connection comes
in ``config.attributes["connection"]``, already inside the transaction that has the store
to itself (:func:`store.schema.migration_connection`); this file opens none of its own, so
migrating never bypasses the store's engines, locks and SQLite settings. Offline (``--sql``)
mode is not offered: the baseline revision inspects the store it adopts.
"""

from __future__ import annotations

from alembic import context
from alembic.util import CommandError

from dogma_evolve.store.migrations import render_item
from dogma_evolve.store.models import Base

if context.is_offline_mode():
    raise CommandError("the store's migrations run on a database, not as SQL text (--sql)")

connection = context.config.attributes.get("connection")
if connection is None:
    raise CommandError("no store to migrate: open it with Store(url) or give --url")

context.configure(
    connection=connection,
    # SQLite rolls DDL back too (the store's engines leave transactions to SQLAlchemy)
    transactional_ddl=True if connection.dialect.name == "sqlite" else None,
    target_metadata=Base.metadata,
    compare_type=True,
    render_as_batch=True,  # ALTERs SQLite can do (it copies the table)
    render_item=render_item,
)
with context.begin_transaction():
    context.run_migrations()
