"""`ix_webhook_statuses_pending` holds only the statuses still to apply: (received_at),
partial on `applied_at IS NULL`, instead of (applied_at, received_at) over every status.

Every reader of it asks for unapplied statuses (the sweeper's replay, the expiry of parked
ones, a hold's check). Over every status it grew with each one ever received, and
applying a status (setting `applied_at`) added a second entry for the row's new version,
on the webhook's hot path. Partial, an applied status's new version is not indexed there,
and the index stays the size of what is pending.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

PENDING = "applied_at IS NULL"


def upgrade() -> None:
    op.drop_index("ix_webhook_statuses_pending", table_name="webhook_statuses")
    op.create_index(
        "ix_webhook_statuses_pending",
        "webhook_statuses",
        ["received_at"],
        postgresql_where=sa.text(PENDING),
        sqlite_where=sa.text(PENDING),
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_statuses_pending", table_name="webhook_statuses")
    op.create_index(
        "ix_webhook_statuses_pending", "webhook_statuses", ["applied_at", "received_at"]
    )
