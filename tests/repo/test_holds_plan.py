"""The dead-letter page asks, for every message it lists, whether the provider may still
hold a copy (`app/repo/holds.py`), and one of its questions is which of the provider ids
the messages are known by were reported `failed`. Asked by identity and provider id alone,
no index served it: every status row ever received was read, for each page shown (a
sequential scan of `webhook_statuses`). With the identities' providers in the question,
the `(provider, provider_message_id)` index answers it. PostgreSQL only."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text

from app.db import Database
from app.models import Message
from app.repo.holds import holds_for

from ..conftest import T0
from ..factories import make_world
from .plans import MESSAGES, delivered_history, plans_of, rows_read

HISTORY = 3000


def test_the_failed_ids_of_a_dead_letter_page_are_found_by_index(db: Database) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    world = make_world(db)
    common = {"tenant": world.tenant_id, "identity": world.identity_id, "t0": T0}
    with db.transaction() as session:
        # A history of delivered messages and their applied statuses...
        delivered_history(session, common, HISTORY)
        # ...and two dead letters: one the provider reported failed, one it never did.
        session.execute(
            MESSAGES,
            {**common, "status": "failed", "tag": "dead", "delivered_at": None}
            | {"with_ids": True, "count": 2},
        )
        session.execute(
            text(
                "UPDATE webhook_statuses SET status = 'failed', "
                "provider_message_id = 'wamid.dead.1' WHERE dedupe_key = 'old-1'"
            )
        )
        session.execute(text("ANALYZE messages, webhook_statuses"))  # (rolled back)
        dead = list(
            session.scalars(select(Message).where(Message.status == "failed").order_by(Message.id))
        )

    with plans_of(db) as plans, db.transaction() as session:
        holds = holds_for(session, dead)

    # The rule still answers as it did: the one reported failed is not held.
    assert holds[dead[0].id] is None
    assert holds[dead[1].id] == (
        "provider id wamid.dead.2 was accepted in cycle 1 and never reported failed"
    )
    on_statuses = [
        (statement, rows_read(plan[0]["Plan"]))
        for statement, plan in plans
        if "webhook_statuses" in statement
    ]
    assert len(on_statuses) >= 3, [statement for statement, _ in plans]
    for statement, scans in on_statuses:
        assert all(kind != "Seq Scan" for kind, _, _ in scans), (statement, scans)
        assert sum(rows for _, _, rows in scans) <= 20, (statement, scans)
