"""Runs say what they are: ``runs.kind`` (``search``, ``scale`` or ``ablate``).

Why: ``evolve scale`` and ``evolve ablate`` record their trainings as runs too, and until now
the only mark of such a run was a ``"kind"`` key in its config JSON (``"scale"``,
``"ablate"``; a search has none), which every reader had to parse and interpret alike. A
column is typed, cannot be missing, and can be queried ("the newest search").

Existing rows are backfilled from that key: ``scale`` and ``ablate`` keep their kind, every
other run (no key) is a ``search``. The config is left as it is. The column is added
nullable, filled, then made NOT NULL, which SQLite does by copying the table (batch mode).
A downgrade writes the key back into the config of every scale and ablate run that lacks
it (runs created after this revision need not carry it), so programs of revision 0005 still
tell them from searches.

Revision 0006, after 0005.
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_runs = sa.table(
    "runs",
    sa.column("id", sa.String(length=32)),
    sa.column("config", sa.Text()),
    sa.column("kind", sa.String(length=16)),
)
#: The values the config key took before this revision (``evolve scale``, ``evolve ablate``).
_KEYED_KINDS = ("scale", "ablate")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(length=16), nullable=True))
    _backfill()
    with op.batch_alter_table("runs") as batch:
        batch.alter_column("kind", existing_type=sa.String(length=16), nullable=False)


def downgrade() -> None:
    _restore_config_keys()
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("kind")


def _backfill() -> None:
    """Every run becomes a search, then the runs whose config says scale or ablate get that."""
    op.execute(_runs.update().values(kind="search"))
    connection = op.get_bind()
    keyed = [
        {"run_id": run_id, "run_kind": kind}
        for run_id, config in connection.execute(sa.select(_runs.c.id, _runs.c.config))
        if (kind := _config_kind(config)) is not None
    ]
    if keyed:
        by_id = _runs.update().where(_runs.c.id == sa.bindparam("run_id"))
        connection.execute(by_id.values(kind=sa.bindparam("run_kind")), keyed)


def _config_kind(config: str | None) -> str | None:
    """The kind a run's stored config names (``scale``, ``ablate``), or None for a search."""
    try:
        value = json.loads(config) if config else None
    except ValueError:
        return None
    kind = value.get("kind") if isinstance(value, dict) else None
    return kind if kind in _KEYED_KINDS else None


def _restore_config_keys() -> None:
    """Put ``"kind"`` back into the config of the scale and ablate runs whose config lacks it."""
    connection = op.get_bind()
    query = sa.select(_runs.c.id, _runs.c.config, _runs.c.kind).where(_runs.c.kind.in_(_KEYED_KINDS))
    restored = [
        {"run_id": run_id, "run_config": _canonical({**config, "kind": kind})}
        for run_id, text, kind in connection.execute(query)
        if isinstance(config := json.loads(text), dict) and config.get("kind") != kind
    ]
    if restored:
        by_id = _runs.update().where(_runs.c.id == sa.bindparam("run_id"))
        connection.execute(by_id.values(config=sa.bindparam("run_config")), restored)


def _canonical(value: object) -> str:
    """The store's canonical JSON text (``store.models.canonical_json`` of this revision's day)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
