"""The schema: tenants, identities, messages, attempts, events, webhooks, staff.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=50), nullable=False),
        sa.Column("target", sa.String(length=100), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_table(
        "tenants",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("api_key_prefix", sa.String(length=32), nullable=False),
        sa.Column("api_key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("api_key_prefix", name=op.f("uq_tenants_api_key_prefix")),
        sa.UniqueConstraint("name", name=op.f("uq_tenants_name")),
    )
    op.create_table(
        "identities",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "tenant_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("provider", sa.String(length=20), nullable=False),
        sa.Column("account_id", sa.String(length=100), nullable=False),
        sa.Column("base_url", sa.String(length=500), nullable=False),
        sa.Column("token_encrypted", sa.Text(), nullable=False),
        sa.Column("app_secret_encrypted", sa.Text(), nullable=True),
        sa.Column("verify_token_hash", sa.String(length=64), nullable=True),
        sa.Column("sender", sa.String(length=100), nullable=True),
        sa.Column("reply_rate", sa.Float(), nullable=False),
        sa.Column("campaign_rate", sa.Float(), nullable=False),
        sa.Column("total_rate", sa.Float(), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("paused_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_identities_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_identities")),
        sa.UniqueConstraint(
            "provider", "account_id", name=op.f("uq_identities_provider_account_id")
        ),
    )
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_identities_tenant_id"), ["tenant_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_identities_verify_token_hash"), ["verify_token_hash"], unique=False
        )

    op.create_table(
        "staff",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("role", sa.String(length=10), nullable=False),
        sa.Column("tenant_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_staff_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_staff")),
        sa.UniqueConstraint("email", name=op.f("uq_staff_email")),
    )
    op.create_table(
        "conversation_windows",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "identity_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("recipient", sa.String(length=100), nullable=False),
        sa.Column("last_inbound_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("open_until", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["identity_id"],
            ["identities.id"],
            name=op.f("fk_conversation_windows_identity_id_identities"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_windows")),
        sa.UniqueConstraint(
            "identity_id", "recipient", name=op.f("uq_conversation_windows_identity_id_recipient")
        ),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "tenant_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column(
            "identity_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("recipient", sa.String(length=100), nullable=False),
        sa.Column("lane", sa.String(length=10), nullable=False),
        sa.Column("body_text", sa.Text(), nullable=True),
        sa.Column("template", sa.JSON(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("cycle", sa.Integer(), nullable=False),
        sa.Column("provider_key_cycle", sa.Integer(), nullable=False),
        sa.Column("correlation_id", sa.String(length=64), nullable=True),
        sa.Column("provider_message_id", sa.String(length=200), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("unknown_attempts", sa.Integer(), nullable=False),
        sa.Column("rate_limited_attempts", sa.Integer(), nullable=False),
        sa.Column("had_unknown_outcome", sa.Boolean(), nullable=False),
        sa.Column("request_started_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rung_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failure_class", sa.String(length=20), nullable=True),
        sa.Column("last_error", sa.JSON(), nullable=True),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("sending_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["identity_id"], ["identities.id"], name=op.f("fk_messages_identity_id_identities")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_messages_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
    )
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index("ix_messages_correlation_id", ["correlation_id"], unique=True)
        batch_op.create_index(
            "ix_messages_due", ["identity_id", "lane", "status", "next_attempt_at"], unique=False
        )
        batch_op.create_index(
            "ix_messages_provider_message_id", ["provider_message_id"], unique=False
        )
        batch_op.create_index(
            "ix_messages_queued_age", ["identity_id", "lane", "status", "queued_at"], unique=False
        )
        batch_op.create_index("ix_messages_status_failed_at", ["status", "failed_at"], unique=False)
        batch_op.create_index(
            "ix_messages_thread", ["identity_id", "recipient", "request_started_ms"], unique=False
        )
        batch_op.create_index(
            "uq_messages_tenant_idempotency_key",
            ["tenant_id", "idempotency_key"],
            unique=True,
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
            sqlite_where=sa.text("idempotency_key IS NOT NULL"),
        )

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("provider", sa.String(length=20), nullable=False),
        sa.Column(
            "identity_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["identity_id"],
            ["identities.id"],
            name=op.f("fk_webhook_deliveries_identity_id_identities"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "message_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("cycle", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("provider_key", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("provider_message_id", sa.String(length=200), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name=op.f("fk_attempts_message_id_messages")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint(
            "message_id", "cycle", "number", name=op.f("uq_attempts_message_id_cycle_number")
        ),
    )
    op.create_table(
        "message_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "message_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("cycle", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=10), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("from_status", sa.String(length=10), nullable=True),
        sa.Column("to_status", sa.String(length=10), nullable=True),
        sa.Column("applied", sa.Boolean(), nullable=False),
        sa.Column("refusal", sa.String(length=20), nullable=True),
        sa.Column("provider_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("dedupe_key", sa.String(length=400), nullable=True),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name=op.f("fk_message_events_message_id_messages")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_message_events")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_message_events_dedupe_key")),
    )
    with op.batch_alter_table("message_events", schema=None) as batch_op:
        batch_op.create_index("ix_message_events_message", ["message_id", "id"], unique=False)

    op.create_table(
        "webhook_statuses",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "delivery_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("provider", sa.String(length=20), nullable=False),
        sa.Column(
            "identity_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("dedupe_key", sa.String(length=400), nullable=False),
        sa.Column("provider_message_id", sa.String(length=200), nullable=True),
        sa.Column("correlation_id", sa.String(length=512), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("provider_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", sa.String(length=20), nullable=True),
        sa.Column(
            "message_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name=op.f("fk_webhook_statuses_delivery_id_webhook_deliveries"),
        ),
        sa.ForeignKeyConstraint(
            ["identity_id"],
            ["identities.id"],
            name=op.f("fk_webhook_statuses_identity_id_identities"),
        ),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name=op.f("fk_webhook_statuses_message_id_messages")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_statuses")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_webhook_statuses_dedupe_key")),
    )
    with op.batch_alter_table("webhook_statuses", schema=None) as batch_op:
        batch_op.create_index(
            "ix_webhook_statuses_pending", ["applied_at", "received_at"], unique=False
        )
        batch_op.create_index(
            "ix_webhook_statuses_provider_message_id",
            ["provider", "provider_message_id"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_statuses", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_statuses_provider_message_id")
        batch_op.drop_index("ix_webhook_statuses_pending")

    op.drop_table("webhook_statuses")
    with op.batch_alter_table("message_events", schema=None) as batch_op:
        batch_op.drop_index("ix_message_events_message")

    op.drop_table("message_events")
    op.drop_table("attempts")
    op.drop_table("webhook_deliveries")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_messages_tenant_idempotency_key",
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
            sqlite_where=sa.text("idempotency_key IS NOT NULL"),
        )
        batch_op.drop_index("ix_messages_thread")
        batch_op.drop_index("ix_messages_status_failed_at")
        batch_op.drop_index("ix_messages_queued_age")
        batch_op.drop_index("ix_messages_provider_message_id")
        batch_op.drop_index("ix_messages_due")
        batch_op.drop_index("ix_messages_correlation_id")

    op.drop_table("messages")
    op.drop_table("conversation_windows")
    op.drop_table("staff")
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_identities_verify_token_hash"))
        batch_op.drop_index(batch_op.f("ix_identities_tenant_id"))

    op.drop_table("identities")
    op.drop_table("tenants")
    op.drop_table("audit_log")
