"""The drains' two questions of each step, answered from the rows they concern.

1. `ix_messages_waiting` becomes (identity_id, lane, id + 0), partial on the waiting rows
   as before: the claim's order.
2. `ix_messages_owed_verdicts` (identity_id, lane, next_attempt_at), partial on the
   messages owing a verdict (normally none): `owed_verdicts`, which read the identity's
   whole backlog through another index (10,000 rows and 13 ms a step in `bench/pacing.py`).

The claim: a drain claims the oldest due messages of one identity and lane. Ordered by
`id`, it let PostgreSQL choose the primary key: rated as finding its rows at once (it takes
the waiting rows as spread evenly over the table, where they sit after the whole history),
it read every message from the table's first row; with statistics taken before a backlog,
it read and sorted the identity's whole lane through another index. Measured in
`bench/pacing.py`: about 2,000 rows read per claim. The claim now orders by `id + 0`, which
only this index gives, and is planned with no sort (`claim_batch`).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

WAITING = "status IN ('queued', 'sending')"
OWING = "pending_verdict IS NOT NULL"


def _partial(where: str = WAITING) -> dict[str, object]:
    return {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}


def upgrade() -> None:
    op.drop_index("ix_messages_waiting", table_name="messages")
    op.create_index(
        "ix_messages_waiting",
        "messages",
        ["identity_id", "lane", sa.text("(id + 0)")],
        **_partial(),
    )
    op.create_index(
        "ix_messages_owed_verdicts",
        "messages",
        ["identity_id", "lane", "next_attempt_at"],
        **_partial(OWING),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_owed_verdicts", table_name="messages")
    op.drop_index("ix_messages_waiting", table_name="messages")
    op.create_index("ix_messages_waiting", "messages", ["identity_id", "lane"], **_partial())
