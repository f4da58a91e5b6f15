"""Runs know who drives them: ``runs.heartbeat`` and ``runs.driver``.

Why: a run whose driver was killed stayed ``running`` until someone resumed it, so readers
could not tell a live run from a dead one, and nothing stopped two drivers from resuming the
same run at once. The driver now claims its run (``driver``: a token such as
``host:pid:random``), refreshes ``heartbeat`` while it works and clears both when it stops
(``store.liveness``). A ``running`` run whose heartbeat is stale, or that has none, is shown
``interrupted``; a claim of a run whose driver is alive is refused.

Both columns are nullable and start NULL: runs stored before this revision have no driver,
so a ``running`` one among them is shown ``interrupted`` (it is: the program that wrote it
could not hold it) and any driver may resume it. A downgrade drops both (who held a run
is only meaningful while that driver lives).

Revision 0007, after 0006.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("heartbeat", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("driver", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("driver")
        batch.drop_column("heartbeat")
