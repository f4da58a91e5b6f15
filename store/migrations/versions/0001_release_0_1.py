"""Baseline: the schema of release 0.1 (its ``schema_version`` 2), as its create_all made it.

Why: from here on every schema change is an Alembic revision, and a revision needs a
starting point that is what stores really contain. These are release 0.1's tables,
constraints and indexes, with the same (unnamed, backend-chosen) constraint names.

A store written before Alembic has some or all of these tables and no ``alembic_version``
table. Upgrading it runs this revision too: each table is created only where it is
missing, so an old store is adopted as it is (a store older than ``schema_version`` 2 has
no ``leases`` and no ``schema_version`` yet; they are added) and a new store is created
whole. The ``schema_version`` row release 0.1 wrote (version 2) is written where missing.

Revision 0001, the first.
"""

from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("last_generation", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def _genomes() -> None:
    op.create_table(
        "genomes",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("yaml", sa.Text(), nullable=False),
        sa.Column("sequence", sa.Text(), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def _individuals() -> None:
    op.create_table(
        "individuals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("genome_id", sa.String(length=64), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("operator", sa.Text(), nullable=True),
        sa.Column("change", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["genome_id"], ["genomes.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "generation", "slot"),
    )
    op.create_index("ix_individuals_genome_id", "individuals", ["genome_id"])
    op.create_index("ix_individuals_run_id", "individuals", ["run_id"])


def _members() -> None:
    op.create_table(
        "members",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("individual_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["individual_id"], ["individuals.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "generation", "individual_id"),
        sa.UniqueConstraint("run_id", "generation", "rank"),
    )
    op.create_index("ix_members_individual_id", "members", ["individual_id"])


def _evaluations() -> None:
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("genome_id", sa.String(length=64), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("fidelity", sa.Text(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("individual_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("metrics", sa.Text(), nullable=False),
        sa.Column("wall_seconds", sa.Float(), nullable=True),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["genome_id"], ["genomes.id"]),
        sa.ForeignKeyConstraint(["individual_id"], ["individuals.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "genome_id", "task", "fidelity", "seed"),
    )
    op.create_index("ix_evaluations_cache", "evaluations", ["genome_id", "task", "fidelity", "seed"])
    op.create_index("ix_evaluations_individual_id", "evaluations", ["individual_id"])


def _lineage() -> None:
    op.create_table(
        "lineage",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("child_id", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=False),
        sa.Column("operator", sa.Text(), nullable=True),
        sa.Column("change", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["child_id"], ["individuals.id"]),
        sa.ForeignKeyConstraint(["parent_id"], ["individuals.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("child_id", "parent_id"),
    )
    op.create_index("ix_lineage_parent_id", "lineage", ["parent_id"])


def _policy() -> None:
    op.create_table(
        "policy",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("operator", sa.Text(), nullable=False),
        sa.Column("context", sa.Text(), nullable=False),
        sa.Column("successes", sa.Float(), nullable=False),
        sa.Column("trials", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "operator", "context"),
    )


def _archive() -> None:
    op.create_table(
        "archive",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("genome_id", sa.String(length=64), nullable=False),
        sa.Column("metrics", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["genome_id"], ["genomes.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "genome_id"),
    )


def _artifacts() -> None:
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("individual_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("blob", sa.LargeBinary(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["individual_id"], ["individuals.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("individual_id", "kind"),
    )


def _schema_version() -> None:
    op.create_table(
        "schema_version",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def _leases() -> None:
    op.create_table(
        "leases",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("genome_id", sa.String(length=64), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("fidelity", sa.Text(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("worker", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("started", sa.DateTime(), nullable=False),
        sa.Column("heartbeat", sa.DateTime(), nullable=False),
        sa.Column("expires", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "genome_id", "task", "fidelity", "seed", "attempt"),
    )
    op.create_index("ix_leases_run_id", "leases", ["run_id"])
    op.create_index("ix_leases_state", "leases", ["state", "expires"])


#: Table name -> how to create it, parents before the tables that refer to them.
TABLES: dict[str, Callable[[], None]] = {
    "runs": _runs,
    "genomes": _genomes,
    "individuals": _individuals,
    "members": _members,
    "evaluations": _evaluations,
    "lineage": _lineage,
    "policy": _policy,
    "archive": _archive,
    "artifacts": _artifacts,
    "schema_version": _schema_version,
    "leases": _leases,
}

_version = sa.table("schema_version", sa.column("id", sa.Integer()), sa.column("version", sa.Integer()))


def upgrade() -> None:
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    for name, create in TABLES.items():
        if name not in existing:
            create()
    if bind.execute(sa.select(_version.c.id).where(_version.c.id == 1)).first() is None:
        op.bulk_insert(_version, [{"id": 1, "version": 2}])


def downgrade() -> None:
    for name in reversed(TABLES):
        op.drop_table(name)  # its indexes go with it
