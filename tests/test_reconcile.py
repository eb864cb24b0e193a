"""The reconciler's entry points (`app/reconcile.py`): statuses from any provider's view,
recorded with their raw delivery in one commit, then each applied in its own transaction,
in a bounded number of statements."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from psycopg.pq import TransactionStatus
from sqlalchemy import event, func, select

from app.db import Database
from app.models import Message, MessageEvent, WebhookDelivery, WebhookStatus
from app.reconcile import InboundMessage, StatusesRefusedError, apply_recorded, record_delivery
from app.repo.inbox import IncomingStatus
from app.repo.status_apply import apply_webhook_status
from app.repo.windows import is_window_open

from .conftest import T0, at
from .factories import World, make_world
from .meta import BUSINESS_ACCOUNT_ID, PHONE_NUMBER_ID, encode, sign, status, status_body
from .whatsapp_world import incoming, sent_message

SECRET = "meta-app-secret"


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)


def test_a_list_of_normalized_statuses_is_recorded_then_each_applied(
    db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.E1")
    statuses = [
        incoming(world, "wamid.E1", "delivered", 5),
        incoming(world, "wamid.E1", "read", 6),
        incoming(world, "wamid.NOT-OURS", "delivered", 5),  # parked: no message has it
        IncomingStatus(
            identity_id=None,
            routing_id="999",
            provider="whatsapp",
            provider_message_id="wamid.E1",
            status="read",
            provider_time=at(6),
        ),
    ]
    inbound = [InboundMessage(world.identity_id, "15557654321", at(4))]
    with db.transaction() as session:
        recorded = record_delivery(
            session,
            provider="whatsapp",
            identity_id=world.identity_id,
            headers={"X-Test": "1"},
            body="{}",
            now=at(7),
            statuses=statuses,
            inbound=inbound,
        )
    assert (len(recorded.to_apply), recorded.duplicates, recorded.unmatched) == (3, 0, 1)
    # Recorded, not applied yet: the raw delivery and the statuses are committed first.
    with db.transaction() as session:
        assert session.get(Message, message_id).status == "sent"  # type: ignore[union-attr]
        assert is_window_open(session, world.identity_id, "15557654321", at(5))

    counts = apply_recorded(db, recorded, at(7))
    assert counts == {"duplicate": 0, "unmatched": 1, "applied": 2, "parked": 1}
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None and (row.status, row.read_at) == ("read", at(6))
        events = session.scalars(
            select(MessageEvent)
            .where(MessageEvent.message_id == message_id, MessageEvent.source == "webhook")
            .order_by(MessageEvent.id)
        ).all()
    # Each applied status wrote its one event, with its outcome.
    assert [(e.to_status, e.from_status, e.applied, e.refusal) for e in events] == [
        ("delivered", "sent", True, None),
        ("read", "delivered", True, None),
    ]


def test_the_same_statuses_recorded_again_are_duplicates_and_add_no_event(
    db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.E2")
    for _ in range(2):
        with db.transaction() as session:
            recorded = record_delivery(
                session,
                provider="whatsapp",
                identity_id=world.identity_id,
                headers={},
                body="{}",
                now=at(7),
                statuses=[incoming(world, "wamid.E2", "delivered", 5)],
            )
        counts = apply_recorded(db, recorded, at(7))
    assert counts == {"duplicate": 1}
    with db.transaction() as session:
        events = session.scalar(
            select(func.count())
            .select_from(MessageEvent)
            .where(MessageEvent.message_id == message_id, MessageEvent.to_status == "delivered")
        )
    assert events == 1


def test_a_status_another_applier_finished_first_is_a_duplicate_and_changes_nothing(
    db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.E3")
    with db.transaction() as session:
        recorded = record_delivery(
            session,
            provider="whatsapp",
            identity_id=world.identity_id,
            headers={},
            body="{}",
            now=at(7),
            # A word we do not track: no event's dedupe key stands in the way, only the
            # status row's own compare-and-set.
            statuses=[incoming(world, "wamid.E3", "deleted", 5)],
        )
    (stored,) = recorded.to_apply
    with db.transaction() as session:  # the sweeper, say, gets there first
        assert apply_webhook_status(session, stored.id, at(8)) == "ignored"
    assert apply_recorded(db, recorded, at(9)) == {"duplicate": 1}
    with db.transaction() as session:
        row = session.get(WebhookStatus, stored.id, populate_existing=True)
        assert row is not None
        assert (row.result, row.applied_at, row.tries, row.message_id) == (
            "ignored",
            at(8),
            1,
            message_id,
        )


def test_statuses_the_database_refuses_raise_so_the_raw_delivery_is_kept_alone(
    db: Database, world: World
) -> None:
    refused = IncomingStatus(
        identity_id=world.identity_id,
        provider="whatsapp",
        provider_message_id="wamid.NAN",
        status="delivered",
        provider_time=at(5),
        raw={"pricing": float("nan")},  # JSON cannot hold it: the database says no
    )
    with pytest.raises(StatusesRefusedError), db.transaction() as session:
        record_delivery(
            session,
            provider="whatsapp",
            identity_id=world.identity_id,
            headers={},
            body="{}",
            now=at(7),
            statuses=[refused],
        )
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0


@contextmanager
def counting(database: Database) -> Iterator[Counter[str]]:
    """SQL statements by verb, the BEGINs and COMMITs psycopg sends for them, and pool
    checkouts, through the engine meanwhile. (A statement outside a transaction commits
    by itself: psycopg sends no BEGIN before it, and no COMMIT after.)"""
    counts: Counter[str] = Counter()

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        driver = conn.connection.driver_connection
        if not driver.autocommit and driver.info.transaction_status == TransactionStatus.IDLE:
            counts["BEGIN"] += 1
        counts[statement.lstrip().split(None, 1)[0].upper()] += 1

    def on_commit(conn: Any) -> None:
        if conn.connection.driver_connection.info.transaction_status != TransactionStatus.IDLE:
            counts["COMMIT"] += 1

    def on_checkout(*args: Any) -> None:
        counts["checkout"] += 1

    event.listen(database.engine, "before_cursor_execute", on_execute)
    event.listen(database.engine, "commit", on_commit)
    event.listen(database.engine.pool, "checkout", on_checkout)
    try:
        yield counts
    finally:
        event.remove(database.engine, "before_cursor_execute", on_execute)
        event.remove(database.engine, "commit", on_commit)
        event.remove(database.engine.pool, "checkout", on_checkout)


def test_a_single_status_delivery_costs_two_statements_and_no_begin_or_commit(
    app: Flask, committed_db: Database
) -> None:
    # Committed for real (not the rolled-back savepoints of `db`), so commits are commits.
    # Its business account known already: a number learns it once, in one transaction.
    world = make_world(
        committed_db,
        account_id=PHONE_NUMBER_ID,
        app_secret=SECRET,
        business_account_id=BUSINESS_ACCOUNT_ID,
    )
    client = app.test_client()
    seen = []
    for wamid in ("wamid.COUNT1", "wamid.COUNT2"):
        message_id = sent_message(committed_db, world, wamid)
        raw = encode(status_body([status(wamid, "delivered", T0 + timedelta(seconds=5))]))
        with counting(committed_db) as counts:
            response = client.post(
                "/webhooks/whatsapp",
                data=raw,
                headers={
                    "Content-Type": "application/json",
                    "X-Hub-Signature-256": sign(raw, SECRET),
                },
            )
        assert response.get_json()["results"] == {"duplicate": 0, "applied": 1}
        seen.append(dict(counts))
        with committed_db.transaction() as session:
            assert session.get(Message, message_id).status == "delivered"  # type: ignore[union-attr]
    # 1. identity lookup (the first delivery only: then the app remembers the identity,
    # and the record checks its secret is still the one). 2. the raw delivery with its
    # status (one WITH). 3. match (locks the message), event, guarded update and
    # claim-and-finish (one WITH). Each commits by itself; all on one pooled connection.
    # (It was 11 statements in three commits, then 7 in 2 on two connections, then 3 in 2
    # transactions: 4 more round trips.)
    assert seen == [{"SELECT": 1, "WITH": 2, "checkout": 1}, {"WITH": 2, "checkout": 1}]
