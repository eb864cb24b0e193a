"""The engine's repairs: stale broken-sender answers, the grace verdict, dead-letter rank,
statuses for numbers we do not know.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("credentials_changed_at", sa.DateTime(timezone=True), nullable=True)
        )

    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dead_letter_rank", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("pending_verdict", sa.String(length=20), nullable=True))
        batch_op.create_index(
            "ix_messages_dead_letters",
            ["status", "dead_letter_rank", "failed_at", "id"],
            unique=False,
        )

    with op.batch_alter_table("webhook_statuses", schema=None) as batch_op:
        batch_op.add_column(sa.Column("routing_id", sa.String(length=100), nullable=True))
        batch_op.alter_column(
            "identity_id",
            existing_type=sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=True,
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_statuses", schema=None) as batch_op:
        batch_op.alter_column(
            "identity_id",
            existing_type=sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
        )
        batch_op.drop_column("routing_id")

    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_dead_letters")
        batch_op.drop_column("pending_verdict")
        batch_op.drop_column("dead_letter_rank")

    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.drop_column("credentials_changed_at")
        batch_op.drop_column("resumed_at")
