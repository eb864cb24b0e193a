"""Matching a status to its message (by identity and provider id) reads a handful of index
entries however many messages the identity has, even before the table's statistics have
seen them: with one index per column, PostgreSQL could AND two bitmap scans, one reading
every message of the identity (found by `bench/webhook_rate.py`: 10,225 entries read for
one webhook). PostgreSQL only: the plan is PostgreSQL's."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text, update

from app.db import Database
from app.models import Message
from app.repo.webhook_sql import match_by_provider_id

from ..factories import make_message, make_world

MESSAGES = 1500


def index_reads(plan: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(node type, index or table, rows it returned) for every scan in the plan."""
    found = []
    if "Scan" in plan["Node Type"]:
        name = plan.get("Index Name") or plan.get("Relation Name") or ""
        found.append((plan["Node Type"], name, int(plan["Actual Rows"])))
    for child in plan.get("Plans", []):
        found += index_reads(child)
    return found


def test_a_status_finds_its_message_without_reading_the_rest_of_the_identity(
    db: Database,
) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    world = make_world(db)
    other = make_world(db, name="globex", account_id="1000002")
    ids = [make_message(db, world, recipient=f"1555{n:07d}") for n in range(MESSAGES)]
    twin = make_message(db, other, recipient="15550000000")
    with db.transaction() as session:
        session.execute(
            update(Message)
            .where(Message.id.in_([*ids, twin]))
            .values(provider_message_id=text("'wamid.lookup.' || id"))
        )
    # A provider id another identity's message also has: the identity decides.
    wanted = ids[MESSAGES // 2]
    with db.transaction() as session:
        wamid = session.get(Message, wanted).provider_message_id  # type: ignore[union-attr]
        session.execute(update(Message).where(Message.id == twin).values(provider_message_id=wamid))
        statement = match_by_provider_id().params(
            identity_id_=world.identity_id, provider_message_id_=wamid
        )
        sql = statement.compile(db.engine, compile_kwargs={"literal_binds": True})
        assert session.execute(statement).one().id == wanted
        plan = session.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()

    scans = index_reads(plan[0]["Plan"])
    assert scans, plan
    assert all(kind != "Seq Scan" for kind, _, _ in scans), scans
    # The wanted message, and at most the few others sharing its provider id.
    assert sum(rows for _, _, rows in scans) <= 5, scans
