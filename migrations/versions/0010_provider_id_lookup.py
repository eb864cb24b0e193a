"""The lookup of a message by its identity and provider id, in one index.

A status is matched to a message by `identity_id` and `provider_message_id`. With only a
single-column index on each, the planner could AND two bitmap scans, one of them reading
every message of the identity: seen when the table's statistics lagged a burst of new
messages (10,225 index entries read for one webhook, 0.4 ms of PostgreSQL CPU and growing
with the identity). One index on both, the provider id first, answers that lookup with a
single index scan and still serves every lookup by the provider id alone.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_messages_provider_message_id_identity",
            ["provider_message_id", "identity_id"],
            unique=False,
        )
        batch_op.drop_index("ix_messages_provider_message_id")


def downgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_messages_provider_message_id", ["provider_message_id"], unique=False
        )
        batch_op.drop_index("ix_messages_provider_message_id_identity")
