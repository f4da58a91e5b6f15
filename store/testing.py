"""Throw-away databases for tests and CI (not used by the engine itself).

``.ci/with-postgres`` starts a PostgreSQL server on loopback and exports its URL in
``EVOLVE_TEST_POSTGRES_URL``; :func:`scratch_database` makes a fresh database on that
server for one test and drops it afterwards, so tests on PostgreSQL are as isolated as
tests on a new SQLite file. :func:`postgres_or_skip` is how a test asks for that server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

POSTGRES_URL_ENV = "EVOLVE_TEST_POSTGRES_URL"
#: Set (to 1) where a missing PostgreSQL server must fail the tests instead of skipping them.
REQUIRE_POSTGRES_ENV = "EVOLVE_REQUIRE_POSTGRES"

TABLES = (
    "runs",
    "genomes",
    "individuals",
    "members",
    "evaluations",
    "lineage",
    "policy",
    "archive",
    "artifacts",
)


def postgres_base_url() -> str | None:
    return os.environ.get(POSTGRES_URL_ENV) or None


def postgres_or_skip() -> str:
    """The test server's URL; without one the calling test is skipped, or failed where
    ``EVOLVE_REQUIRE_POSTGRES`` is set (CI must not pass by skipping)."""
    url = postgres_base_url()
    if url is None:
        skip_unless_required(f"PostgreSQL tests need {POSTGRES_URL_ENV} (run them with .ci/with-postgres)")
    return url


def skip_unless_required(reason: str) -> NoReturn:
    """Skip the calling test for want of PostgreSQL (``reason``), or fail it where
    ``EVOLVE_REQUIRE_POSTGRES`` is set (CI must not pass by skipping); never returns."""
    import pytest  # only tests call this; the store itself does not need pytest

    if os.environ.get(REQUIRE_POSTGRES_ENV):
        pytest.fail(reason + f"; {REQUIRE_POSTGRES_ENV} is set", pytrace=False)
    pytest.skip(reason)


@contextmanager
def scratch_database(base_url: str) -> Iterator[str]:
    """A new, empty database on ``base_url``'s server; dropped (connections and all) after."""
    base = make_url(base_url)
    name = f"evolve_t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield base.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def row_counts(url: str, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    """Rows per table, through a connection of its own (not the store's)."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return {
                table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in tables
            }
    finally:
        engine.dispose()


def scalar(url: str, sql: str) -> object:
    """The one value a query answers, through a connection of its own (not the store's)."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(text(sql)).scalar_one()
    finally:
        engine.dispose()


def execute_unchecked(url: str, statements: list[tuple[str, dict]]) -> None:
    """Run raw SQL with foreign keys unenforced: how tests plant damaged data."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SET LOCAL session_replication_role = replica"))
            for sql, params in statements:
                connection.execute(text(sql), params)
    finally:
        engine.dispose()
