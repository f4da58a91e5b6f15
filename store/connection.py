"""The store's connections (SQLAlchemy engines): SQLite tuned for one writer per run and many
readers, or any URL.

SQLite gets two engines on the same file:

* the write engine begins every transaction with ``BEGIN IMMEDIATE``, so the write lock is
  taken up front and waited for under the busy timeout (a deferred read-then-write
  transaction in WAL mode fails with "database is locked" instead of waiting);
* the read engine begins with a plain (deferred) ``BEGIN`` and sets ``query_only``, so a
  reader sees one consistent WAL snapshot and never holds or asks for the write lock.

Both disable pysqlite's own transaction handling (``isolation_level = None``) and let
SQLAlchemy's "begin" event emit BEGIN, the recipe in SQLAlchemy's SQLite documentation.

PostgreSQL (``postgresql+psycopg://...``) and other servers get one connection pool: writes
run at the server's default READ COMMITTED (a run's generation commit locks its ``runs``
row, genomes shared by runs are inserted with ON CONFLICT DO NOTHING), reads run as
READ ONLY, REPEATABLE READ transactions so a reader sees one snapshot, as on SQLite.

``readonly=True`` (the commands that only read) opens engines that cannot write: a SQLite
file through a ``mode=ro`` URI (never created, never switched to WAL: SQLite itself refuses
any write), a PostgreSQL database with READ ONLY transactions only. Both engines of the
pair are then that one engine.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

from dogma_evolve.store.records import StoreError

BUSY_TIMEOUT_SECONDS = 30.0
_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class Engines:
    write: Engine
    read: Engine  # a second engine (SQLite file) or the write engine with read options
    readonly: bool = False  # opened by a reader: ``write`` is ``read`` and cannot write

    def dispose(self) -> None:
        self.write.dispose()
        if self.read.pool is not self.write.pool:
            self.read.dispose()


def sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL, or None for in-memory / non-SQLite URLs."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def check_sqlite_file(path: Path) -> None:
    """Refuse a file that exists but is not a whole SQLite database, without touching it.

    SQLite itself would report junk as "file is not a database" on first use, but a
    database truncated at a page boundary can look valid until a missing page is read, so
    the header's page size and page count are checked against the file size here.

    The file is read without a lock, beside writers: a checkpoint copies the WAL's pages
    into the file header first, so for a moment the header counts pages the file does not
    hold yet. A short file is therefore only refused when no write is in flight beside it
    (an empty or missing ``-wal`` and ``-journal``) and it is still short when read again.
    """
    if not path.exists():
        return
    if not path.is_file():
        raise StoreError(f"{path} is not a file")
    if path.stat().st_size == 0:
        return  # an empty file is a new database to SQLite (what `touch` or mkstemp leave)
    short = _truncation(path)
    if short is not None and not _write_in_flight(path):
        short = _truncation(path)  # a checkpoint that ended between the reads left it whole
    if short is not None and not _write_in_flight(path):
        raise StoreError(short)


def _truncation(path: Path) -> str | None:
    """Why the file is not a whole SQLite database, read from its size and header, or None."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        header = handle.read(100)
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise StoreError(f"{path} is not a SQLite database (bad header); refusing to use it")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise StoreError(f"{path} is not a SQLite database (page size {page_size})")
    if size % page_size:
        return (
            f"{path} is truncated or damaged: {size} bytes is not a whole number of "
            f"{page_size}-byte pages; refusing to use it"
        )
    page_count = int.from_bytes(header[28:32], "big")
    count_valid = page_count > 0 and header[24:28] == header[92:96]
    if count_valid and size < page_count * page_size:
        return (
            f"{path} is truncated: {size} bytes but its header counts {page_count} pages "
            f"of {page_size} bytes; refusing to use it"
        )
    return None


def _write_in_flight(path: Path) -> bool:
    """Whether a WAL or a rollback journal beside ``path`` holds pages not yet in the file."""
    for suffix in ("-wal", "-journal"):
        beside = path.with_name(path.name + suffix)
        try:
            if beside.stat().st_size > 0:
                return True
        except FileNotFoundError:
            continue
    return False


def _switch_to_wal(cursor: Any, busy_timeout: float) -> None:
    """Put the file in WAL mode. The switch needs an exclusive lock, and SQLite answers
    "database is locked" at once (not after the busy timeout) when other processes open the
    new file at the same moment, so retry until the busy timeout has passed."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.01
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def _sqlite_listeners(
    engine: Engine, *, begin: str, query_only: bool, wal: bool, busy_timeout: float = 0.0
) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys = ON")
            if wal:
                _switch_to_wal(cursor, busy_timeout)
            if query_only:
                cursor.execute("PRAGMA query_only = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql(begin)


def open_engines(
    url: str, busy_timeout: float = BUSY_TIMEOUT_SECONDS, *, create: bool = True, readonly: bool = False
) -> Engines:
    """Engines for ``url``; SQLite files are checked first and never overwritten. With
    ``create=False`` a SQLite file that does not exist (or is empty) is refused, not made;
    ``readonly`` implies it and opens engines that cannot write (module docstring)."""
    create = create and not readonly
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(parsed, pool_pre_ping=True)
        if parsed.get_backend_name() == "postgresql":
            # Same pool, other per-connection settings for the read transactions.
            read: Engine = engine.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
            if readonly:
                return Engines(write=read, read=read, readonly=True)
            return Engines(write=engine, read=read)
        return Engines(write=engine, read=engine, readonly=readonly)

    path = sqlite_file(parsed)
    # pysqlite's `timeout` is SQLite's busy timeout: wait for a lock instead of failing.
    connect_args = {"timeout": busy_timeout}
    if path is None:
        # One shared connection: each new in-memory connection would be a new database.
        engine = create_engine(
            parsed,
            poolclass=StaticPool,
            connect_args={**connect_args, "check_same_thread": False},
        )
        begin = "BEGIN" if readonly else "BEGIN IMMEDIATE"
        _sqlite_listeners(engine, begin=begin, query_only=readonly, wal=False)
        return Engines(write=engine, read=engine, readonly=readonly)

    check_sqlite_file(path)
    if not create and (not path.is_file() or path.stat().st_size == 0):
        state = "is empty" if path.is_file() else "does not exist"
        raise StoreError(f"no store at {path}: the file {state}; nothing was created")
    if readonly:
        # mode=ro: SQLite opens the file read-only whatever its journal mode; a reader of a
        # WAL file may still make the -wal and -shm files beside it, never the file itself.
        uri = f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"
        engine = create_engine(uri, connect_args=connect_args)
        _sqlite_listeners(engine, begin="BEGIN", query_only=True, wal=False)
        return Engines(write=engine, read=engine, readonly=True)
    if not path.parent.is_dir():
        raise StoreError(f"cannot create {path}: folder {path.parent} does not exist")
    write = create_engine(parsed, connect_args=connect_args)
    _sqlite_listeners(write, begin="BEGIN IMMEDIATE", query_only=False, wal=True, busy_timeout=busy_timeout)
    # Switch the file to WAL before any reader connects (a query_only connection cannot).
    with write.connect():
        pass
    read = create_engine(parsed, connect_args=connect_args)
    _sqlite_listeners(read, begin="BEGIN", query_only=True, wal=False)
    return Engines(write=write, read=read)


def describe(url: str) -> str:
    """The URL without a password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only used to word an error
        return os.fspath(url)
