"""Fidelity transfer rows say what the first stage ranked by: ``transfer.ranked_by``.

Why: a single-objective search promotes its first stage by held-out loss (``promote_by``
"loss", the default since the loss was measured to rank short trainings better than their
accuracy), but the audit correlated the first stage's *quality* with the full one, so the
number a report showed was not the rule the run used. The audit now ranks the lower side by
what the run promoted by, and each row records which: ``"quality"`` or ``"loss"`` (the
negated held-out loss, so that ρ > 0 still means the two agree).

Rows written before this revision were computed on quality, so the column is backfilled
with ``"quality"`` (its server default). A downgrade drops it, and with it the rows ranked by
loss: revision 0007's programs would read them as quality, and for a generation without a
stored row they compute the quality transfer from the evaluation rows on read, so nothing
they show is lost.

Revision 0008, after 0007.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("transfer") as batch:
        batch.add_column(
            sa.Column("ranked_by", sa.String(length=16), server_default="quality", nullable=False)
        )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM transfer WHERE ranked_by <> 'quality'"))
    with op.batch_alter_table("transfer") as batch:
        batch.drop_column("ranked_by")
