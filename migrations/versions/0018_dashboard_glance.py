"""The dashboard at a glance (issue 36).

1. `ix_messages_dead_by_lane` holds only the dead letters: failed messages still on the
actionable list (`dead_letter_rank IS NOT NULL`), no longer every failed message.

The overview counted every failed message per identity and lane, canceled and dismissed
ones too, while the dead-letter page it links to lists only the ranked ones (39 against
25 in one tenant). The count now uses the page's definition, and still from the index
alone: with the rank in the predicate the count needs no visit to the table.

2. Campaigns and search by what a person sees: `template_name` (the template's name, kept
beside its JSON), `campaign` (a caller's label) and `recipient_tail` (the last four
characters of the number, which is all the dashboard shows), each indexed with the id for
the newest first; the idempotency key's index takes `text_pattern_ops` on PostgreSQL so a
key's first characters find it (equality still uses it). The existing rows are filled in
one UPDATE: on a large table run it in a quiet hour (it rewrites every message row once).

Revision ID: 0018
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
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


NEW_INDEXES = {
    "ix_messages_recipient_tail": ["recipient_tail", "id"],
    "ix_messages_campaign": ["campaign", "id"],
    "ix_messages_template_name": ["template_name", "id"],
    # The charts' arrivals per step: a range of queued_at per identity.
    "ix_messages_identity_queued_at": ["identity_id", "queued_at"],
}


def upgrade() -> None:
    _swap(DEAD)
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("template_name", sa.String(512), nullable=True))
        batch.add_column(sa.Column("campaign", sa.String(100), nullable=True))
        batch.add_column(sa.Column("recipient_tail", sa.String(4), nullable=True))
    with op.batch_alter_table("staff") as batch:
        batch.add_column(sa.Column("time_zone", sa.String(64), nullable=True))
    postgresql = op.get_bind().dialect.name == "postgresql"
    name = "template->>'name'" if postgresql else "json_extract(template, '$.name')"
    tail = "right(recipient, 4)" if postgresql else "substr(recipient, -4)"
    op.execute(
        f"UPDATE messages SET recipient_tail = {tail}, "
        f"template_name = CASE WHEN template IS NULL THEN NULL ELSE {name} END"
    )
    for index, columns in NEW_INDEXES.items():
        op.create_index(index, "messages", columns)
    op.drop_index("ix_messages_idempotency_key", table_name="messages")
    op.create_index(
        "ix_messages_idempotency_key",
        "messages",
        ["idempotency_key"],
        postgresql_ops={"idempotency_key": "text_pattern_ops"},
    )


def downgrade() -> None:
    op.drop_index("ix_messages_idempotency_key", table_name="messages")
    op.create_index("ix_messages_idempotency_key", "messages", ["idempotency_key"])
    for index in NEW_INDEXES:
        op.drop_index(index, table_name="messages")
    with op.batch_alter_table("staff") as batch:
        batch.drop_column("time_zone")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("recipient_tail")
        batch.drop_column("campaign")
        batch.drop_column("template_name")
    _swap(FAILED)
