"""`ix_messages_leases` (identity_id, lane, lease_until), partial on the messages being
sent: `earliest_due`, a drain's last question when nothing is due, reads its first row.

Asked as `min(lease_until)` (and `min(next_attempt_at)`), with statistics taken before a
backlog, PostgreSQL read the whole waiting set through `ix_messages_waiting_age` for
each: 20,000 rows at every wake of a drain with nothing due. Both are now the first row in
the order an index gives (`ix_messages_due` for the retry time, this one for the lease).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

SENDING = "status = 'sending'"


def upgrade() -> None:
    op.create_index(
        "ix_messages_leases",
        "messages",
        ["identity_id", "lane", "lease_until"],
        postgresql_where=sa.text(SENDING),
        sqlite_where=sa.text(SENDING),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_leases", table_name="messages")
