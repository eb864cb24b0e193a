"""`ix_messages_conversation` (identity_id, lane, recipient, id), partial on the waiting
messages: a drain's claim asks, for each message it would take, whether an earlier one
of the same conversation is still waiting (`app/repo/conversations.py`). Partial, its size
follows the backlog, not the history.

Revision ID: 0017
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

WAITING = "status IN ('queued', 'sending')"


def upgrade() -> None:
    op.create_index(
        "ix_messages_conversation",
        "messages",
        ["identity_id", "lane", "recipient", "id"],
        postgresql_where=sa.text(WAITING),
        sqlite_where=sa.text(WAITING),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_conversation", table_name="messages")
