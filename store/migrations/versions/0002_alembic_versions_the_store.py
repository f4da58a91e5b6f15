"""Alembic versions the store from now on; ``schema_version`` is frozen at 3.

Why: release 0.1 reads ``schema_version`` when it opens a store and refuses one whose
version is above its own 2 ("newer than this program"); at 2 it would open the store and
write to it whatever later revisions changed. Setting the row to 3 once makes every
earlier program refuse every store that Alembic manages. The row is not bumped again:
``alembic_version`` is the schema's version from here on, and a store at a revision a
program does not know is refused by that program (``store.schema``).

Revision 0002, after 0001.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_version = sa.table("schema_version", sa.column("id", sa.Integer()), sa.column("version", sa.Integer()))


def upgrade() -> None:
    op.execute(_version.update().where(_version.c.id == 1).values(version=3))


def downgrade() -> None:
    op.execute(_version.update().where(_version.c.id == 1).values(version=2))
