"""Opening a store: make sure its tables are there, once, whoever else opens it.

The common case (the schema is there) is a read, so opening a store in use by a running
driver takes no write lock. Otherwise tables and the version row are made in one write
transaction, serialised by BEGIN IMMEDIATE on SQLite and by a transaction-scoped advisory
lock on PostgreSQL (its DDL is transactional, so a second process waits, then finds
everything and creates nothing).
"""

from __future__ import annotations

import hashlib

from sqlalchemy import inspect, select, text
from sqlalchemy.orm import Session

from store import transactions
from store.engine import Engines
from store.models import SCHEMA_VERSION, Base, SchemaVersion
from store.records import StoreError

# Any 64-bit constant: the PostgreSQL advisory lock that serialises schema creation.
_SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"dogma-evolve schema").digest()[:8], "big") >> 1


def _schema_version(session: Session) -> int | None:
    """The stored schema version; None when the schema is not (completely) there."""
    connection = session.connection()
    names = set(inspect(connection).get_table_names())
    if not names:
        return None
    if SchemaVersion.__tablename__ not in names:
        return 1 if "runs" in names else None  # stores written before the version table
    version = session.scalar(select(SchemaVersion.version).where(SchemaVersion.id == 1))
    if version is None or not set(Base.metadata.tables) <= names:
        return None
    return int(version)


def _current(version: int | None) -> bool:
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(
            f"the store has schema version {version}, newer than this program's "
            f"{SCHEMA_VERSION}; upgrade dogma-evolve to use it"
        )
    return version == SCHEMA_VERSION


def ensure_schema(engines: Engines) -> None:
    """Create missing tables once, safely when several processes open an empty store."""
    if _current(transactions.read(engines.read, _schema_version, "reading the schema version")):
        return

    def create(session: Session) -> None:
        connection = session.connection()
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
        if _current(_schema_version(session)):
            return  # another process created it while we waited for the lock
        Base.metadata.create_all(connection)
        row = session.get(SchemaVersion, 1)
        if row is None:
            session.add(SchemaVersion(id=1, version=SCHEMA_VERSION))
        else:
            row.version = SCHEMA_VERSION

    transactions.write(engines.write, create, "creating tables")
