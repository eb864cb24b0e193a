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
INDEX = "ix_webhook_statuses_pending"
BUILDING = "ix_webhook_statuses_pending_new"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.drop_index(INDEX, table_name="webhook_statuses")
        op.create_index(INDEX, "webhook_statuses", ["received_at"], sqlite_where=sa.text(PENDING))
        return
    # Built beside the old one without a lock that stops writes (CONCURRENTLY, outside the
    # migration's transaction), then swapped in: a plain DROP and CREATE in one
    # transaction would hold webhook_statuses exclusively for the whole build, stopping
    # every webhook and every recorded send on a large table. Safe to run again after an
    # interruption: a half-built index left by one is dropped and built again, and one
    # built whole (the run stopped before the rename) is kept and only renamed.
    with op.get_context().autocommit_block():
        if not _valid_index(BUILDING):
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {BUILDING}")
            op.execute(
                f"CREATE INDEX CONCURRENTLY {BUILDING} ON webhook_statuses (received_at) "
                f"WHERE {PENDING}"
            )
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
    op.execute(f"ALTER INDEX {BUILDING} RENAME TO {INDEX}")


def _valid_index(name: str) -> bool:
    """The index exists and its build finished (a CONCURRENTLY build that was interrupted
    leaves it behind marked invalid)."""
    valid = op.get_bind().scalar(
        sa.text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"),
        {"name": name},
    )
    return bool(valid)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="webhook_statuses")
    op.create_index(INDEX, "webhook_statuses", ["applied_at", "received_at"])
