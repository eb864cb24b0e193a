"""Matching a status to its message (by identity and provider id) reads a handful of rows
however many messages the identity has, even when the table's statistics have not seen
them: PostgreSQL, thinking the identity rare, walked an index leading with `identity_id`
and filtered on the provider id, reading every message of the identity for one webhook
(found by `bench/webhook_rate.py`: 10,225 index entries; an index on both columns did not
stop it). Both lookups, the one-statement apply's and the step-by-step one, compare the
identity unindexed (`app/repo/sql.py`, `unindexed`). PostgreSQL only: the plan is
PostgreSQL's."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, text, update

from app.db import Database
from app.models import Attempt, Message, WebhookDelivery, WebhookStatus
from app.repo.inbox import _PARKED  # the parked statuses' lookup
from app.repo.matching import _BY_ATTEMPT, _BY_PROVIDER_ID  # the step-by-step lookups
from app.repo.webhook_sql_apply import match_by_provider_id

from ..conftest import T0
from ..factories import make_message, make_world
from .plans import rows_read

MESSAGES = 1500
BACKGROUND = 300


def with_provider_ids(db: Database, ids: list[int]) -> None:
    with db.transaction() as session:
        session.execute(
            update(Message)
            .where(Message.id.in_(ids))
            .values(provider_message_id=text("'wamid.lookup.' || id"))
        )


def with_attempts(db: Database, ids: list[int]) -> None:
    """An accepted attempt for each, with the message's provider id."""
    with db.transaction() as session:
        session.execute(
            insert(Attempt),
            [
                {
                    "message_id": message_id,
                    "cycle": 1,
                    "number": 1,
                    "provider_key": f"key-{message_id}",
                    "started_at": T0,
                    "provider_message_id": f"wamid.lookup.{message_id}",
                }
                for message_id in ids
            ],
        )


LOOKUPS = {
    "one statement": match_by_provider_id(),
    "step by step": _BY_PROVIDER_ID,
    "by an earlier attempt's id": _BY_ATTEMPT,
}


@pytest.mark.parametrize("lookup", list(LOOKUPS))
def test_a_status_finds_its_message_without_reading_the_rest_of_the_identity(
    db: Database, lookup: str
) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    world = make_world(db)
    other = make_world(db, name="globex", account_id="1000002")
    # The statistics as they were before a burst: another identity's sent messages...
    earlier = [make_message(db, other, recipient=f"1556{n:07d}") for n in range(BACKGROUND)]
    with_provider_ids(db, earlier)
    with_attempts(db, earlier)
    with db.transaction() as session:
        session.execute(text("ANALYZE messages, attempts"))  # (rolled back with the test)
    # ...then this identity's burst, which they have not seen.
    ids = [make_message(db, world, recipient=f"1555{n:07d}") for n in range(MESSAGES)]
    with_provider_ids(db, ids)
    with_attempts(db, ids)
    # A provider id another identity's message also has: the identity decides.
    wanted = ids[MESSAGES // 2]
    with db.transaction() as session:
        wamid = session.get(Message, wanted).provider_message_id  # type: ignore[union-attr]
        session.execute(
            update(Message).where(Message.id == earlier[0]).values(provider_message_id=wamid)
        )
        session.execute(
            update(Attempt)
            .where(Attempt.message_id == earlier[0])
            .values(provider_message_id=wamid)
        )
        statement = LOOKUPS[lookup].params(
            identity_id_=world.identity_id, provider_message_id_=wamid
        )
        sql = statement.compile(db.engine, compile_kwargs={"literal_binds": True})
        assert session.execute(statement).first().id == wanted  # type: ignore[union-attr]
        plan = session.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()

    scans = rows_read(plan[0]["Plan"])
    assert scans, plan
    assert all(kind != "Seq Scan" for kind, _, _ in scans), scans
    # The wanted message and the other sharing its provider id (through their attempts and
    # the primary key, for the third lookup): a handful, where a walk of the identity reads
    # hundreds.
    assert sum(rows for _, _, rows in scans) <= 20, scans


def test_an_accepted_send_finds_its_parked_statuses_without_reading_everyone_elses(
    db: Database,
) -> None:
    """Other senders' statuses on a shared number stay parked for days: the lookup each
    accepted send makes reads the ones for its provider id, not every unapplied one."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    world = make_world(db)
    with db.transaction() as session:
        delivery_id = session.execute(
            insert(WebhookDelivery)
            .values(
                provider="whatsapp",
                identity_id=world.identity_id,
                headers={},
                body="{}",
                received_at=T0,
            )
            .returning(WebhookDelivery.id)
        ).scalar_one()
        session.execute(
            insert(WebhookStatus),
            [
                {
                    "delivery_id": delivery_id,
                    "provider": "whatsapp",
                    "identity_id": world.identity_id,
                    "dedupe_key": f"parked-{n}",
                    "provider_message_id": f"wamid.elsewhere.{n}",
                    "status": "delivered",
                    "received_at": T0,
                    "payload": {},
                    "result": "parked",
                }
                for n in range(MESSAGES)
            ],
        )
        statement = _PARKED.statement.params(
            identity_id_=world.identity_id, provider_message_id_="wamid.elsewhere.7"
        )
        sql = statement.compile(db.engine, compile_kwargs={"literal_binds": True})
        assert len(session.execute(statement).all()) == 1
        plan = session.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()

    scans = rows_read(plan[0]["Plan"])
    assert scans, plan
    # The one status with that provider id (and the identity's row, for its provider).
    assert sum(rows for _, _, rows in scans) <= 5, scans
