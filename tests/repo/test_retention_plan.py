"""A retention batch reads about a batch of rows, however much is already purged: its
indexes are partial on what is not purged yet, and a delivery's statuses are found by
`delivery_id` (migration 0019; without that index each batch read every status). The
statements run once more under EXPLAIN ANALYZE (`plans_of`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from app.db import Database
from app.repo.retention import Cutoff, purge_deliveries, purge_messages

from ..conftest import T0
from ..factories import make_world
from .plans import plans_of, rows_read

# The statements whose plans this test reads: SELECT and UPDATE (not WITH).
KINDS = ("SELECT", "UPDATE")
DONE = 20_000  # purged before (enough rows that an index beats a scan)
LEFT = 500  # still to purge
BATCH = 50

HISTORY = text(
    """
    INSERT INTO messages (tenant_id, identity_id, recipient, lane, body_text, fingerprint,
        status, cycle, provider_key_cycle, attempt, unknown_attempts, rate_limited_attempts,
        had_unknown_outcome, provider_message_id, created_at, content_purged_at)
    SELECT :tenant, :identity, '1555' || lpad(n::text, 7, '0'), 'campaign',
        CASE WHEN n > :done THEN 'hello' END, md5(n::text), 'delivered', 1, 1, 1, 0, 0, false,
        'wamid.' || n, :old + n * interval '1 second',
        CASE WHEN n <= :done THEN :old + interval '31 days' END
    FROM generate_series(1, :count) AS n
    """
)
ATTEMPTS_AND_EVENTS = [
    text(
        """
        INSERT INTO attempts (message_id, cycle, number, provider_key, started_at,
            http_status, response_body)
        SELECT id, 1, 1, md5(id::text), created_at, 200, '{}' FROM messages
        """
    ),
    text(
        """
        INSERT INTO message_events (message_id, cycle, source, kind, applied, received_at,
            detail)
        SELECT id, 1, 'worker', 'sent', true, created_at, '{"error": {"raw": "x"}}'::json
        FROM messages
        """
    ),
]
DELIVERIES = text(
    """
    INSERT INTO webhook_deliveries (id, provider, identity_id, headers, body, received_at,
        purged_at)
    SELECT n, 'whatsapp', :identity, '{}', 'raw', :old + n * interval '1 second',
        CASE WHEN n <= :done THEN :old + interval '31 days' END
    FROM generate_series(1, :count) AS n
    """
)
CALLBACKS = [
    text(
        """
        INSERT INTO callback_endpoints (id, tenant_id, url, host, events, enabled,
            secret_sealed, failures_in_row, created_at, updated_at)
        VALUES (1, :tenant, 'https://crm.example/hook', 'crm.example', '["*"]', true,
            'sealed', 0, :old, :old)
        """
    ),
    text(
        """
        INSERT INTO callbacks (endpoint_id, message_id, sequence, event, payload, created_at,
            state, attempts, next_attempt_at, delivered_at)
        SELECT 1, id, 1, 'delivered', '{"to": "x"}'::json, created_at, 'delivered', 1,
            created_at, created_at
        FROM messages
        """
    ),
]
STATUSES = text(
    """
    INSERT INTO webhook_statuses (delivery_id, provider, identity_id, dedupe_key, status,
        received_at, payload, tries, applied_at, result)
    SELECT n, 'whatsapp', :identity, 'd-' || n, 'delivered', :old, '{}'::json, 1, :old,
        'applied'
    FROM generate_series(1, :count) AS n
    """
)


def test_a_purge_batch_reads_about_a_batch_of_rows(db: Database) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    world = make_world(db)
    old = T0 - timedelta(days=60)
    values = {
        "tenant": world.tenant_id,
        "identity": world.identity_id,
        "old": old,
        "done": DONE,
        "count": DONE + LEFT,
    }
    with db.transaction() as session:
        for statement in (HISTORY, *ATTEMPTS_AND_EVENTS, *CALLBACKS, DELIVERIES, STATUSES):
            session.execute(statement, values)
        for table in (
            "messages",
            "attempts",
            "message_events",
            "webhook_deliveries",
            "webhook_statuses",
            "callbacks",
        ):
            session.execute(text(f"ANALYZE {table}"))

    cutoff = Cutoff(world.tenant_id, T0 - timedelta(days=30))
    with plans_of(db, KINDS) as plans, db.transaction() as session:
        assert purge_messages(session, cutoff, T0, BATCH) == BATCH
        assert purge_deliveries(session, world.identity_id, cutoff.before, T0, BATCH) == BATCH
    assert plans
    for statement, plan in plans:
        scans = rows_read(plan[0]["Plan"])
        read = sum(count for _, _, count in scans)
        # The batch, its look at each row's pending statuses, and the rows it updates.
        assert read <= 6 * BATCH, (" ".join(statement.split())[:200], scans)
        assert not any(kind == "Seq Scan" for kind, _, _ in scans), (statement, scans)
