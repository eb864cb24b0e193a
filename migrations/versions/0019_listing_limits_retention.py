"""The tenant's API: listing messages, intake limits, retention (issue 34).

1. Tenants get their intake limits (`max_requests_per_second`, `max_waiting`; null: none)
   and `retention_days` (30 unless set).
2. Messages get `content_purged_at`, webhook deliveries `purged_at`: when retention emptied
   their content.
3. Indexes for `GET /v1/messages`, newest first per tenant: by tenant, status, failure
   class, identity and creation time; message events by receipt time (`updated_since`).
4. Retention's batches read the oldest unpurged messages and deliveries from indexes
   partial on what is not purged yet, so a batch never walks what is already done, and a
   delivery's statuses by `delivery_id` (without it, each batch read every status).

On PostgreSQL the indexes are built CONCURRENTLY (outside the migration's transaction), so
the messages table keeps taking writes while they build; a build interrupted halfway leaves
an invalid index, which is dropped and built again on the next run.

Revision ID: 0019
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0014"
branch_labels = None
depends_on = None

# (name, table, columns, partial condition or None)
INDEXES: list[tuple[str, str, list[str], str | None]] = [
    ("ix_messages_tenant_list", "messages", ["tenant_id", "id"], None),
    ("ix_messages_tenant_status", "messages", ["tenant_id", "status", "id"], None),
    (
        "ix_messages_tenant_class",
        "messages",
        ["tenant_id", "failure_class", "id"],
        "failure_class IS NOT NULL",
    ),
    ("ix_messages_identity_list", "messages", ["identity_id", "id"], None),
    ("ix_messages_tenant_created", "messages", ["tenant_id", "created_at"], None),
    (
        "ix_messages_unpurged",
        "messages",
        ["tenant_id", "created_at"],
        "content_purged_at IS NULL",
    ),
    ("ix_message_events_received_at", "message_events", ["received_at"], None),
    ("ix_webhook_statuses_delivery_id", "webhook_statuses", ["delivery_id"], None),
    (
        "ix_webhook_deliveries_unpurged",
        "webhook_deliveries",
        ["identity_id", "received_at"],
        "purged_at IS NULL",
    ),
]


def upgrade() -> None:
    op.add_column("tenants", sa.Column("max_requests_per_second", sa.Float(), nullable=True))
    op.add_column("tenants", sa.Column("max_waiting", sa.Integer(), nullable=True))
    op.add_column(
        "tenants",
        sa.Column("retention_days", sa.Integer(), nullable=False, server_default="30"),
    )
    op.add_column(
        "messages", sa.Column("content_purged_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "webhook_deliveries", sa.Column("purged_at", sa.DateTime(timezone=True), nullable=True)
    )
    if op.get_bind().dialect.name != "postgresql":
        for name, table, columns, where in INDEXES:
            partial = {"sqlite_where": sa.text(where)} if where else {}
            op.create_index(name, table, columns, **partial)  # type: ignore[arg-type]
        return
    with op.get_context().autocommit_block():
        for name, table, columns, where in INDEXES:
            if _valid_index(name):
                continue
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            condition = f" WHERE {where}" if where else ""
            op.execute(
                f"CREATE INDEX CONCURRENTLY {name} ON {table} ({', '.join(columns)}){condition}"
            )


def _valid_index(name: str) -> bool:
    valid = op.get_bind().scalar(
        sa.text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"),
        {"name": name},
    )
    return bool(valid)


def downgrade() -> None:
    for name, table, _columns, _where in INDEXES:
        op.drop_index(name, table_name=table)
    op.drop_column("webhook_deliveries", "purged_at")
    op.drop_column("messages", "content_purged_at")
    op.drop_column("tenants", "retention_days")
    op.drop_column("tenants", "max_waiting")
    op.drop_column("tenants", "max_requests_per_second")
