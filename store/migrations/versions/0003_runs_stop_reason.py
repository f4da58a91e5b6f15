"""Runs say why they stopped: ``runs.stop_reason``.

Why: a run that ends before its configured generations (its evaluation budget spent, or
no unseen genome left to breed) must say so in its status and summary; before this, a
run that stalled was reported ``finished`` like one that completed.

Revision 0003, after 0002.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("stop_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("stop_reason")
