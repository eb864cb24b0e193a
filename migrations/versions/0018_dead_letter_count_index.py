"""`ix_messages_dead_by_lane` holds only the dead letters: failed messages still on the
actionable list (`dead_letter_rank IS NOT NULL`), no longer every failed message.

The overview counted every failed message per identity and lane, canceled and dismissed
ones too, while the dead-letter page it links to lists only the ranked ones (39 against
25 in one tenant). The count now uses the page's definition, and still from the index
alone: with the rank in the predicate the count needs no visit to the table.

Revision ID: 0018
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0013"
branch_labels = None
depends_on = None

INDEX = "ix_messages_dead_by_lane"
BUILDING = "ix_messages_dead_by_lane_new"
DEAD = "status = 'failed' AND dead_letter_rank IS NOT NULL"
FAILED = "status = 'failed'"


def _swap(where: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.drop_index(INDEX, table_name="messages")
        op.create_index(INDEX, "messages", ["identity_id", "lane"], sqlite_where=sa.text(where))
        return
    # Built beside the old one without blocking writes (CONCURRENTLY, outside the
    # migration's transaction), then renamed in; safe to run again after an interruption
    # (as 0013 does).
    with op.get_context().autocommit_block():
        if not _valid_index(BUILDING):
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {BUILDING}")
            op.execute(
                f"CREATE INDEX CONCURRENTLY {BUILDING} ON messages (identity_id, lane) "
                f"WHERE {where}"
            )
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
    op.execute(f"ALTER INDEX {BUILDING} RENAME TO {INDEX}")


def _valid_index(name: str) -> bool:
    valid = op.get_bind().scalar(
        sa.text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"),
        {"name": name},
    )
    return bool(valid)


def upgrade() -> None:
    _swap(DEAD)


def downgrade() -> None:
    _swap(FAILED)
