"""Identities: campaign-lane pauses, who paused, when secrets were set; staff logins that
can be disabled; the indexes that keep the dashboard's pages from scanning the messages.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

WAITING = "status IN ('queued', 'sending')"
FAILED = "status = 'failed'"
DEAD_LETTER_ORDER = [
    sa.column("dead_letter_rank"),
    sa.column("failed_at").desc(),
    sa.column("id").desc(),
]


def _partial(where: str) -> dict[str, object]:
    return {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}


def upgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.add_column(sa.Column("paused_by", sa.String(length=200), nullable=True))
        batch_op.add_column(
            sa.Column("campaign_paused_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("campaign_paused_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("campaign_paused_by", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("token_set_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("app_secret_set_at", sa.DateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table("staff", schema=None) as batch_op:
        batch_op.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))

    op.create_index("ix_messages_waiting", "messages", ["identity_id", "lane"], **_partial(WAITING))
    op.create_index("ix_messages_waiting_age", "messages", ["queued_at", "id"], **_partial(WAITING))
    op.create_index("ix_messages_sent_at", "messages", ["sent_at"])
    op.create_index("ix_messages_delivered_at", "messages", ["delivered_at"])
    op.create_index("ix_messages_read_at", "messages", ["read_at"])
    op.create_index(
        "ix_messages_dead_letter_order", "messages", DEAD_LETTER_ORDER, **_partial(FAILED)
    )
    for name, column in (
        ("tenant", "tenant_id"),
        ("identity", "identity_id"),
        ("class", "failure_class"),
    ):
        op.create_index(
            f"ix_messages_dead_letter_{name}",
            "messages",
            [sa.column(column), *DEAD_LETTER_ORDER],
            **_partial(FAILED),
        )
    op.create_index(
        "ix_messages_dead_letter_identity_class",
        "messages",
        [sa.column("identity_id"), sa.column("failure_class"), *DEAD_LETTER_ORDER],
        **_partial(FAILED),
    )
    op.create_index(
        "ix_messages_dead_by_lane", "messages", ["identity_id", "lane"], **_partial(FAILED)
    )
    op.create_index("ix_messages_idempotency_key", "messages", ["idempotency_key"])
    op.create_index(
        "ix_messages_recipient_prefix",
        "messages",
        ["recipient"],
        postgresql_ops={"recipient": "text_pattern_ops"},
    )
    op.create_index("ix_attempts_provider_message_id", "attempts", ["provider_message_id"])
    op.create_index("ix_webhook_statuses_message_id", "webhook_statuses", ["message_id"])
    op.create_index("ix_audit_log_target", "audit_log", ["target", "id"])


def downgrade() -> None:
    for table, name in (
        ("audit_log", "ix_audit_log_target"),
        ("webhook_statuses", "ix_webhook_statuses_message_id"),
        ("attempts", "ix_attempts_provider_message_id"),
        ("messages", "ix_messages_recipient_prefix"),
        ("messages", "ix_messages_idempotency_key"),
        ("messages", "ix_messages_dead_by_lane"),
        ("messages", "ix_messages_dead_letter_identity_class"),
        ("messages", "ix_messages_dead_letter_class"),
        ("messages", "ix_messages_dead_letter_identity"),
        ("messages", "ix_messages_dead_letter_tenant"),
        ("messages", "ix_messages_dead_letter_order"),
        ("messages", "ix_messages_read_at"),
        ("messages", "ix_messages_delivered_at"),
        ("messages", "ix_messages_sent_at"),
        ("messages", "ix_messages_waiting_age"),
        ("messages", "ix_messages_waiting"),
    ):
        op.drop_index(name, table_name=table)
    with op.batch_alter_table("staff", schema=None) as batch_op:
        batch_op.drop_column("disabled_at")
    with op.batch_alter_table("identities", schema=None) as batch_op:
        for column in (
            "app_secret_set_at",
            "token_set_at",
            "campaign_paused_by",
            "campaign_paused_reason",
            "campaign_paused_at",
            "paused_by",
        ):
            batch_op.drop_column(column)
