"""Alembic migrations of the store's schema: every schema change is a revision in ``versions/``.

How they run
    ``Store(url)`` upgrades the store to the newest revision (head) when it opens it
    (:func:`store.schema.upgrade_to_head`), with an Alembic :class:`~alembic.config.Config`
    built in code by :func:`config`: no ``alembic.ini`` is needed at runtime. The upgrade
    runs in one transaction that has the store to itself (``BEGIN IMMEDIATE`` on SQLite,
    an advisory lock on PostgreSQL), so processes opening one store at once upgrade it once.
    A store whose ``alembic_version`` names a revision this program does not have was
    written by a newer program and is refused untouched.

Where they start
    Revision ``0001`` is the schema of release 0.1 exactly as its ``create_all`` made it;
    on a store made before Alembic (no ``alembic_version`` table) it creates only the
    tables that are missing, which adopts that store as it is. Revision ``0002`` hands the
    versioning over from the old ``schema_version`` table to Alembic (see its docstring).

How to add a migration
    1. Change the tables in ``store/models.py``.
    2. Bring a scratch store to the current head, then let Alembic compare it with the
       models (``python -m dogma_evolve.store.migrations`` is Alembic's own command line with this
       package's configuration and a store URL; ``alembic revision --autogenerate`` is the
       plain-Alembic equivalent of the second command)::

           python -m dogma_evolve.store.migrations --url sqlite:////tmp/scratch.db upgrade head
           python -m dogma_evolve.store.migrations --url sqlite:////tmp/scratch.db \\
               revision --autogenerate --rev-id 0009 -m "what changes and why"

       Without ``--autogenerate`` (and without ``--url``) ``revision`` writes an empty
       revision to fill in by hand, e.g. for a data migration.
    3. Read the new ``store/migrations/versions/0009_*.py``: write the docstring (why),
       check ``upgrade()`` and ``downgrade()``, keep literal values there (a migration must
       not import today's models: it describes the schema of its own day). Operations are
       rendered in batch mode (``with op.batch_alter_table(...)``) so that they also work
       on SQLite, which alters tables by copying them; the upgrade runs with SQLite's
       foreign keys off and checks them (``PRAGMA foreign_key_check``) before it commits.
    4. ``pytest tests/store/test_migrations.py``: a store created through the
       migrations must equal the models (no autogenerate diff), on SQLite and PostgreSQL,
       and the 0.1 fixture store must still upgrade and resume.

Revision ids are short sequence numbers (``--rev-id``) so files sort in order.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Literal

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.types import TypeDecorator

SCRIPT_LOCATION = Path(__file__).resolve().parent


def config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for the store, built in code (no ini file).

    ``connection`` is the one ``env.py`` migrates (see :func:`store.schema.upgrade_to_head`);
    commands that touch no database (``history``, ``heads``, a plain ``revision``) need none.
    """
    cfg = Config(stdout=sys.stdout)  # the stdout of now (Alembic's default is bound at import)
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def script() -> ScriptDirectory:
    """The revisions this program knows (read once per process)."""
    return ScriptDirectory.from_config(config())


def heads() -> frozenset[str]:
    """The newest revision(s): what every store is upgraded to."""
    return frozenset(script().get_heads())


def known(revision: str) -> bool:
    """Whether this program has ``revision`` (a store at an unknown one is from a newer one)."""
    return any(found.revision == revision for found in script().walk_revisions())


def render_item(kind: str, obj: Any, _context: Any) -> str | Literal[False]:
    """Autogenerate renders a column type of ours (``JSONText``, ``UTCDateTime``) as the
    plain type it stores, so a revision does not depend on ``store.models``."""
    if kind == "type" and isinstance(obj, TypeDecorator):
        return f"sa.{obj.impl_instance!r}"
    return False
