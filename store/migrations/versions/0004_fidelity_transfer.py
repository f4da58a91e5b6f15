"""Fidelity transfer of multi-fidelity runs, per generation: the ``transfer`` table.

Why: a multi-fidelity run lets ``min_steps`` decide which children are trained at the
full ``steps``; that is only sound if the cheap ranking predicts the dear one. The engine
now measures it when it commits a generation (Spearman's ρ and Kendall's τ-b of the two
qualities over every candidate so far evaluated at both, each with a bootstrap interval)
and keeps it here, one row per (run, generation, pair of fidelities), so a report shows
how it developed without recomputing it. Existing rows are untouched; runs committed
before this revision have no rows (the report computes theirs on read).

Revision 0004, after 0003.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "transfer",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("lower_fidelity", sa.Text(), nullable=False),
        sa.Column("higher_fidelity", sa.Text(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("spearman", sa.Float(), nullable=True),
        sa.Column("spearman_low", sa.Float(), nullable=True),
        sa.Column("spearman_high", sa.Float(), nullable=True),
        sa.Column("kendall", sa.Float(), nullable=True),
        sa.Column("kendall_low", sa.Float(), nullable=True),
        sa.Column("kendall_high", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "generation", "lower_fidelity", "higher_fidelity"),
    )


def downgrade() -> None:
    op.drop_table("transfer")
