"""Shards of a lane (issue 30, item 2): `messages.shard_key`, a stable hash of the
recipient (`app/shards.py`), and `ix_messages_waiting` with it as its last column.

1. `shard_key` integer, not null, 0 until filled.
2. Filled from each row's recipient for the rows a drain may still claim: waiting ones
   (`queued`, `sending`) and `failed` ones (an operator's requeue makes them `queued`
   again). Rows that are sent, delivered or read are never claimed again and keep 0.
   New rows get theirs at intake (`Message.shard_key`'s default).
3. `ix_messages_waiting` becomes (identity_id, lane, id + 0, shard_key), partial on the
   waiting rows: the claim still walks it in its order, and a shard's key range is tested
   in the index, so a shard's claim reads no other shard's rows from the table.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

WAITING = "status IN ('queued', 'sending')"
BATCH = 5000
# The hash as `app/shards.py` had it when this ran (a migration keeps its own copy).
SHARD_KEYS = 1024


def _shard_key(recipient: str) -> int:
    digest = hashlib.blake2b(recipient.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") % SHARD_KEYS


def _partial() -> dict[str, object]:
    return {"postgresql_where": sa.text(WAITING), "sqlite_where": sa.text(WAITING)}


def upgrade() -> None:
    op.add_column(
        "messages",
        sa.Column("shard_key", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    connection = op.get_bind()
    last = 0
    while True:
        rows = connection.execute(
            sa.text(
                "SELECT id, recipient FROM messages"
                " WHERE id > :last AND status IN ('queued', 'sending', 'failed')"
                " ORDER BY id LIMIT :batch"
            ),
            {"last": last, "batch": BATCH},
        ).all()
        if not rows:
            break
        connection.execute(
            sa.text("UPDATE messages SET shard_key = :key WHERE id = :id"),
            [{"id": row.id, "key": _shard_key(row.recipient)} for row in rows],
        )
        last = rows[-1].id
    op.drop_index("ix_messages_waiting", table_name="messages")
    op.create_index(
        "ix_messages_waiting",
        "messages",
        ["identity_id", "lane", sa.text("(id + 0)"), "shard_key"],
        **_partial(),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_waiting", table_name="messages")
    op.create_index(
        "ix_messages_waiting",
        "messages",
        ["identity_id", "lane", sa.text("(id + 0)")],
        **_partial(),
    )
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("shard_key")
