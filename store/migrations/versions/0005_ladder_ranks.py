"""The Pareto elite ranked by its extrapolated loss up a size ladder: ``ladder_ranks``.

Why: a candidate that wins at the search's tiny size may not hold up larger. ``evolve run
--ladder`` now trains the run's elite at several sizes, fits a power law per elite and ranks
them by the fitted loss at ``--target-params``; this table keeps that ranking per individual
(with the fit, its interval, and the scale run that holds the points) so ``audit`` and
``report`` show it without refitting. Existing tables are untouched; older runs have no rows.

Revision 0005, after 0004.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ladder_ranks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("individual_id", sa.Integer(), nullable=False),
        sa.Column("scale_run_id", sa.String(length=32), nullable=True),
        sa.Column("target_params", sa.Float(), nullable=False),
        sa.Column("quality", sa.Float(), nullable=True),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("loss_low", sa.Float(), nullable=True),
        sa.Column("loss_high", sa.Float(), nullable=True),
        sa.Column("E", sa.Float(), nullable=True),
        sa.Column("A", sa.Float(), nullable=True),
        sa.Column("alpha", sa.Float(), nullable=True),
        sa.Column("alpha_low", sa.Float(), nullable=True),
        sa.Column("alpha_high", sa.Float(), nullable=True),
        sa.Column("params_low", sa.Float(), nullable=True),
        sa.Column("params_high", sa.Float(), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.ForeignKeyConstraint(["scale_run_id"], ["runs.id"]),
        sa.ForeignKeyConstraint(["individual_id"], ["individuals.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "generation", "individual_id"),
    )
    op.create_index(op.f("ix_ladder_ranks_run_id"), "ladder_ranks", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_ladder_ranks_run_id"), table_name="ladder_ranks")
    op.drop_table("ladder_ranks")
