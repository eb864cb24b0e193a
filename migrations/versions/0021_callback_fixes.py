"""Status callbacks, after review (issue 33): the trigger of migration 0016, replaced.

1. A callback's `created_at` is when the row was written, `now()`: the retry window is
   measured from there (a claim on an earlier clock moves it back to that claim, see
   `claim_due`). The provider's time of the change stays in the payload's `timestamp` and
   makes the row due at once. (A change applied late, a webhook carrying a 25-hour-old
   time, used to be given up after its first POST.)
2. The sequence is counted per message in `callback_sequences`, under the row lock the
   UPDATE already holds, no longer `max(sequence)` over the message's callbacks rows: those
   go with their endpoint (and with retention), and a receiver drops a sequence that goes
   back. Existing messages start from their highest sequence.
3. A message's own `status_callback` gets no row of its own when a subscribed endpoint
   (of the tenant, taking this event) has the same URL: one change, one POST, one
   webhook-id. Its row also follows the events of the endpoint whose host it is on.
4. `ix_callbacks_done`: retention's oldest finished callbacks per endpoint
   (app/repo/callback_retention.py).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

FUNCTION = """
CREATE OR REPLACE FUNCTION ratchet_queue_callbacks() RETURNS trigger
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
    -- The provider's time of the change: the payload's only.
    occurred := LEAST(now(), COALESCE(CASE NEW.status
        WHEN 'sent' THEN NEW.sent_at
        WHEN 'delivered' THEN NEW.delivered_at
        WHEN 'read' THEN NEW.read_at
        WHEN 'failed' THEN NEW.failed_at
        WHEN 'queued' THEN NEW.queued_at
    END, now()));
    -- Under the row lock this UPDATE holds: no other change of this message runs now.
    INSERT INTO callback_sequences AS s (message_id, last) VALUES (NEW.id, 1)
    ON CONFLICT (message_id) DO UPDATE SET last = s.last + 1
    RETURNING s.last INTO seq;
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
        SELECT e.id, NEW.id, seq, kind, body::json, NULL, now(), 'pending', 0, occurred
          FROM callback_endpoints e
         WHERE e.tenant_id = NEW.tenant_id AND e.events::jsonb ? kind
        UNION ALL
        SELECT u.endpoint_id, NEW.id, seq, kind, body::json, u.url, now(), 'pending', 0,
               occurred
          FROM message_callback_urls u
          JOIN callback_endpoints h ON h.id = u.endpoint_id
         WHERE u.message_id = NEW.id
           AND h.events::jsonb ? kind
           AND NOT EXISTS (SELECT 1 FROM callback_endpoints e
                            WHERE e.tenant_id = NEW.tenant_id AND e.url = u.url
                              AND e.events::jsonb ? kind)
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


def upgrade() -> None:
    op.create_table(
        "callback_sequences",
        sa.Column("message_id", BIG_ID, nullable=False),
        sa.Column("last", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name="fk_callback_sequences_message_id_messages"
        ),
        sa.PrimaryKeyConstraint("message_id", name="pk_callback_sequences"),
    )
    op.execute(
        "INSERT INTO callback_sequences (message_id, last) "
        "SELECT message_id, max(sequence) FROM callbacks GROUP BY message_id"
    )
    op.create_index(
        "ix_callbacks_done",
        "callbacks",
        ["endpoint_id", "created_at"],
        postgresql_where=sa.text("state <> 'pending'"),
        sqlite_where=sa.text("state <> 'pending'"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        shipped = Path(__file__).with_name("0016_status_callbacks.py")
        spec = importlib.util.spec_from_file_location("ratchet_migration_0016", shipped)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        op.execute(module.FUNCTION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.drop_index("ix_callbacks_done", table_name="callbacks")
    op.drop_table("callback_sequences")
