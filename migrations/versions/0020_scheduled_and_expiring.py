"""Scheduled and expiring messages (issue 34): `not_before` (a `send_at` still ahead when
the API accepted it) and `expires_at` (the end of its validity), both nullable; and
`ix_messages_scheduled`, partial on the queued messages that have a `not_before`, so a
drain finds the earliest one it must ring itself for without reading its backlog.

Revision ID: 0020
Revises: 0017
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0018"
branch_labels = None
depends_on = None

SCHEDULED = "status = 'queued' AND not_before IS NOT NULL"


def upgrade() -> None:
    op.add_column("messages", sa.Column("not_before", sa.DateTime(timezone=True)))
    op.add_column("messages", sa.Column("expires_at", sa.DateTime(timezone=True)))
    op.create_index(
        "ix_messages_scheduled",
        "messages",
        ["identity_id", "lane", "not_before"],
        postgresql_where=sa.text(SCHEDULED),
        sqlite_where=sa.text(SCHEDULED),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_scheduled", table_name="messages")
    op.drop_column("messages", "expires_at")
    op.drop_column("messages", "not_before")
