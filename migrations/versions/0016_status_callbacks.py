"""Status callbacks: the tenants' endpoints, the outbox of callbacks and their attempts, a
message's own `status_callback`, and (PostgreSQL) the trigger that writes the outbox.

The trigger runs in the transaction of every UPDATE that changes a message's status (a
worker's record, a webhook's apply, in one statement or step by step, a requeue, a cancel),
so an applied change and its callbacks commit together or not at all, with no statement
and no round trip of ours. A refused or duplicate status changes no status and writes
nothing; `queued -> sending` (a claim) is left out by the trigger's WHEN, so claims do not
even call it. The sequence is the message's last one plus one, read under the row lock
the UPDATE holds, so it only grows in commit order. A NOTIFY on `ratchet_callbacks`
(delivered at commit) names the endpoints that have something new. SQLite (the demo) gets
the tables and no trigger: callbacks are a PostgreSQL feature (docs/callbacks.md).

Revision ID: 0016
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
WHEN = sa.DateTime(timezone=True)

FUNCTION = """
CREATE FUNCTION ratchet_queue_callbacks() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kind text;
    occurred timestamptz;
    seq integer;
    body jsonb;
    rung text;
BEGIN
    -- Nobody listens: one index probe, nothing written.
    IF NOT EXISTS (SELECT 1 FROM callback_endpoints WHERE tenant_id = NEW.tenant_id) THEN
        RETURN NULL;
    END IF;
    kind := CASE
        WHEN NEW.status = 'queued' THEN 'message.requeued'
        WHEN NEW.status = 'failed' AND NEW.failure_class = 'canceled' THEN 'message.canceled'
        ELSE 'message.' || NEW.status
    END;
    occurred := LEAST(now(), COALESCE(CASE NEW.status
        WHEN 'sent' THEN NEW.sent_at
        WHEN 'delivered' THEN NEW.delivered_at
        WHEN 'read' THEN NEW.read_at
        WHEN 'failed' THEN NEW.failed_at
        WHEN 'queued' THEN NEW.queued_at
    END, now()));
    -- Under the row lock this UPDATE holds: no other change of this message runs now.
    SELECT COALESCE(max(sequence), 0) + 1 INTO seq FROM callbacks WHERE message_id = NEW.id;
    body := jsonb_build_object(
        'type', kind,
        'timestamp', to_char(occurred AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data', jsonb_build_object(
            'message_id', NEW.id,
            'idempotency_key', NEW.idempotency_key,
            'provider_message_id', NEW.provider_message_id,
            'identity_id', NEW.identity_id,
            'to', NEW.recipient,
            'status', NEW.status,
            'cycle', NEW.cycle,
            'sequence', seq,
            'error', CASE WHEN NEW.status = 'failed' THEN jsonb_build_object(
                'class', NEW.failure_class,
                'provider', NEW.last_error::jsonb -> 'provider',
                'http_status', NEW.last_error::jsonb -> 'http_status',
                'code', NEW.last_error::jsonb -> 'code',
                'subcode', NEW.last_error::jsonb -> 'subcode',
                'title', NEW.last_error::jsonb -> 'title',
                'message', NEW.last_error::jsonb -> 'message'
            ) END
        )
    );
    WITH written AS (
        INSERT INTO callbacks (endpoint_id, message_id, sequence, event, payload, url,
                               created_at, state, attempts, next_attempt_at)
        SELECT e.id, NEW.id, seq, kind, body::json, NULL, occurred, 'pending', 0, occurred
          FROM callback_endpoints e
         WHERE e.tenant_id = NEW.tenant_id AND e.events::jsonb ? kind
        UNION ALL
        SELECT u.endpoint_id, NEW.id, seq, kind, body::json, u.url, occurred, 'pending', 0,
               occurred
          FROM message_callback_urls u
         WHERE u.message_id = NEW.id
        RETURNING endpoint_id
    )
    SELECT string_agg(DISTINCT endpoint_id::text, ',') INTO rung FROM written;
    -- Delivered at commit, only if it commits: the sweeper's listener rings those
    -- endpoints' drains at once (the sweeper's pass is the safety net).
    IF rung IS NOT NULL THEN
        PERFORM pg_notify('ratchet_callbacks', rung);
    END IF;
    RETURN NULL;
END
$$
"""

TRIGGER = """
CREATE TRIGGER messages_status_callbacks
AFTER UPDATE OF status ON messages
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status <> 'sending')
EXECUTE FUNCTION ratchet_queue_callbacks()
"""


def upgrade() -> None:
    op.create_table(
        "callback_endpoints",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("tenant_id", BIG_ID, nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("secret_sealed", sa.Text(), nullable=False),
        sa.Column("previous_secret_sealed", sa.Text(), nullable=True),
        sa.Column("previous_secret_until", WHEN, nullable=True),
        sa.Column("disabled_reason", sa.String(length=200), nullable=True),
        sa.Column("disabled_at", WHEN, nullable=True),
        sa.Column("failures_in_row", sa.Integer(), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_callback_endpoints_tenant_id_tenants"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_callback_endpoints"),
    )
    op.create_index("ix_callback_endpoints_tenant", "callback_endpoints", ["tenant_id"])
    op.create_table(
        "callbacks",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("endpoint_id", BIG_ID, nullable=False),
        sa.Column("message_id", BIG_ID, nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=30), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", WHEN, nullable=False),
        sa.Column("delivered_at", WHEN, nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["callback_endpoints.id"],
            name="fk_callbacks_endpoint_id_callback_endpoints",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name="fk_callbacks_message_id_messages"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_callbacks"),
    )
    op.create_index("ix_callbacks_message", "callbacks", ["message_id", "sequence"])
    op.create_index(
        "ix_callbacks_due",
        "callbacks",
        ["endpoint_id", "next_attempt_at"],
        postgresql_where=sa.text("state = 'pending'"),
        sqlite_where=sa.text("state = 'pending'"),
    )
    op.create_table(
        "callback_attempts",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("callback_id", BIG_ID, nullable=False),
        sa.Column("endpoint_id", BIG_ID, nullable=False),
        sa.Column("attempted_at", WHEN, nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["callback_id"],
            ["callbacks.id"],
            name="fk_callback_attempts_callback_id_callbacks",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["callback_endpoints.id"],
            name="fk_callback_attempts_endpoint_id_callback_endpoints",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_callback_attempts"),
    )
    op.create_index("ix_callback_attempts_endpoint", "callback_attempts", ["endpoint_id", "id"])
    op.create_index("ix_callback_attempts_callback", "callback_attempts", ["callback_id"])
    op.create_table(
        "message_callback_urls",
        sa.Column("message_id", BIG_ID, nullable=False),
        sa.Column("endpoint_id", BIG_ID, nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name="fk_message_callback_urls_message_id_messages"
        ),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["callback_endpoints.id"],
            name="fk_message_callback_urls_endpoint_id_callback_endpoints",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", name="pk_message_callback_urls"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)
        op.execute(TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER messages_status_callbacks ON messages")
        op.execute("DROP FUNCTION ratchet_queue_callbacks()")
    op.drop_table("message_callback_urls")
    op.drop_table("callback_attempts")
    op.drop_table("callbacks")
    op.drop_table("callback_endpoints")
