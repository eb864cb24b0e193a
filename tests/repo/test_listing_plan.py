"""GET /v1/messages reads about a page of rows for each filter, not the tenant's history
nor another tenant's: each filter has an index leading with it and ending with the order
(migration 0019). The statements run once more under EXPLAIN ANALYZE (`plans_of`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.db import Database
from app.listquery import ListQuery, encode_cursor
from app.repo.listing import list_messages

from ..conftest import T0
from ..factories import make_world
from .plans import plans_of, rows_read

HISTORY = 4000
LIMIT = 20

# Every 40th message failed (`permanent`), every 7th a reply; one recipient per 100;
# created a minute apart, the newest last; each with one event when it was created.
ROWS = text(
    """
    INSERT INTO messages (tenant_id, identity_id, recipient, lane, body_text, fingerprint,
        status, cycle, provider_key_cycle, attempt, unknown_attempts, rate_limited_attempts,
        had_unknown_outcome, failure_class, queued_at, created_at)
    SELECT :tenant, :identity, '1555' || lpad((n % 100)::text, 7, '0'),
        CASE WHEN n % 7 = 0 THEN 'reply' ELSE 'campaign' END, 'hello', md5(n::text),
        CASE WHEN n % 40 = 0 THEN 'failed' ELSE 'delivered' END, 1, 1, 1, 0, 0, false,
        CASE WHEN n % 40 = 0 THEN 'permanent' END,
        :t0 + n * interval '1 minute', :t0 + n * interval '1 minute'
    FROM generate_series(1, :count) AS n
    """
)
EVENTS = text(
    """
    INSERT INTO message_events (message_id, cycle, source, kind, applied, received_at)
    SELECT id, 1, 'api', 'create', true, created_at FROM messages WHERE tenant_id = :tenant
    """
)


def test_every_filter_reads_about_a_page_of_rows(db: Database) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    other = make_world(db, name="other", account_id="1000002")
    world = make_world(db)
    with db.transaction() as session:
        for owner in (other, world):  # another tenant's history first, lower ids
            values = {"tenant": owner.tenant_id, "identity": owner.identity_id}
            session.execute(ROWS, {**values, "t0": T0, "count": HISTORY})
            session.execute(EVENTS, values)
        session.execute(text("ANALYZE messages"))
        session.execute(text("ANALYZE message_events"))

    recent = T0 + timedelta(minutes=HISTORY - 10)
    queries: dict[str, dict[str, Any]] = {
        "none": {},
        "status": {"status": "failed"},
        "failure class": {"failure_class": "permanent"},
        "identity": {"identity_id": world.identity_id},
        "lane": {"lane": "reply"},
        "recipient": {"to": "15550000042"},
        "created since": {"created_since": recent},
        "updated since": {"updated_since": recent},
    }
    for name, filters in queries.items():
        query = ListQuery(limit=LIMIT, **filters)
        with plans_of(db) as plans, db.transaction() as session:
            page = list_messages(session, world.tenant_id, query)
            assert page.messages, name
            assert all(m.tenant_id == world.tenant_id for m in page.messages)
            if page.next_before is not None:  # and the next page, from its cursor
                following = query.model_copy(update={"cursor": encode_cursor(page.next_before)})
                list_messages(session, world.tenant_id, following)
        listed = [plan for statement, plan in plans if "FROM messages" in statement]
        assert listed, name
        for plan in listed:
            scans = rows_read(plan[0]["Plan"])
            read = sum(count for _, _, count in scans)
            # A page and its look-ahead row; a lane is one message in seven, so its filter
            # throws away about six for each it keeps; a recipient's are read whole, every
            # tenant's (ix_messages_recipient_prefix; a bitmap scan counts each row twice):
            # one number's history, never the table's (with room for the plan's choice of
            # index, which varies with what earlier tests left in the statistics: 168 seen
            # after test_claim_plan); the changes since a time likewise
            # (ix_message_events_received_at: 11 a tenant here), every tenant's.
            per_recipient = 2 * HISTORY // 100
            bound = {
                "lane": 8 * (LIMIT + 1),
                "recipient": 3 * per_recipient,
                "updated since": 2 * 2 * 11,
            }.get(name, 2 * LIMIT + 2)
            assert read <= bound, (name, scans)
            assert not any(kind == "Seq Scan" for kind, _, _ in scans), (name, scans)
