"""Statuses under numbers we do not know: stored finished, deduplicated by routing id, and
never matched to a message (least of all another tenant's)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.db import Database
from app.models import Message, MessageEvent, WebhookStatus
from app.repo.acceptance import record_accepted
from app.repo.attempts import finish_attempt, start_attempt
from app.repo.claims import claim_message
from app.repo.inbox import (
    IncomingStatus,
    Result,
    expire_parked,
    pending_status_ids,
    store_delivery,
    store_statuses,
)
from app.repo.status_apply import apply_webhook_status

from ..conftest import T0
from ..factories import make_message, make_world

LEASE = timedelta(seconds=25)
WINDOW = timedelta(minutes=10)


def unknown(routing_id: str, wamid: str = "wamid.X", word: str = "delivered") -> IncomingStatus:
    return IncomingStatus(
        identity_id=None,
        routing_id=routing_id,
        provider="whatsapp",
        provider_message_id=wamid,
        status=word,
        provider_time=T0,
        raw={"id": wamid, "status": word},
    )


def store(db: Database, statuses: list[IncomingStatus]) -> tuple[list[int], int]:
    with db.transaction() as session:
        delivery = store_delivery(session, "whatsapp", None, {}, "{}", T0)
        return store_statuses(session, delivery, statuses, T0)


def rows(db: Database) -> list[WebhookStatus]:
    with db.transaction() as session:
        return list(session.scalars(select(WebhookStatus).order_by(WebhookStatus.id)))


def test_a_status_without_an_identity_is_stored_finished_and_never_replayed_or_expired(
    db: Database,
) -> None:
    assert store(db, [unknown("999")]) == ([], 0)
    (row,) = rows(db)
    assert (row.identity_id, row.routing_id, row.result, row.applied_at) == (
        None,
        "999",
        Result.UNMATCHED,
        T0,
    )
    assert row.payload["raw"] == {"id": "wamid.X", "status": "delivered"}
    with db.transaction() as session:
        assert pending_status_ids(session, T0, WINDOW) == []
        assert expire_parked(session, T0 + timedelta(days=30), timedelta(days=7)) == 0


def test_unmatched_statuses_are_deduplicated_by_their_routing_id(db: Database) -> None:
    world = make_world(db)
    assert store(db, [unknown("999"), unknown("999")]) == ([], 1)
    assert store(db, [unknown("999")]) == ([], 1)
    # Another unknown number, and our own identity, with the same provider id and status.
    assert store(db, [unknown("888")]) == ([], 0)
    ours = IncomingStatus(
        identity_id=world.identity_id,
        routing_id="1000001",
        provider="whatsapp",
        provider_message_id="wamid.X",
        status="delivered",
        provider_time=T0,
    )
    ids, duplicates = store(db, [ours])
    assert len(ids) == 1 and duplicates == 0
    assert sorted((r.routing_id, r.identity_id) for r in rows(db)) == [
        ("1000001", world.identity_id),
        ("888", None),
        ("999", None),
    ]


def test_a_status_needs_an_identity_or_the_routing_id_it_came_under() -> None:
    with pytest.raises(ValueError, match="routing id"):
        unknown(None)  # type: ignore[arg-type]


def test_a_row_without_an_identity_matches_no_message_even_naming_another_tenants_ids(
    db: Database,
) -> None:
    # The reconciler's guard, for a row that reached it anyway (store_statuses never lets
    # one): it names a message's provider id, its correlation id and its attempt's id.
    world = make_world(db, name="globex", account_id="777")
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", T0)
        finish_attempt(session, claim, T0, "accepted", provider_message_id="wamid.THEIRS")
        record_accepted(session, claim, "wamid.THEIRS", T0, unknown_attempts=0, had_unknown=False)
        correlation = session.get(Message, message_id).correlation_id  # type: ignore[union-attr]
        delivery = store_delivery(session, "whatsapp", None, {}, "{}", T0)
        row = WebhookStatus(
            delivery_id=delivery,
            provider="whatsapp",
            identity_id=None,
            routing_id="999",
            dedupe_key="whatsapp:route=999:wamid.THEIRS:read",
            provider_message_id="wamid.THEIRS",
            correlation_id=correlation,
            status="read",
            provider_time=T0,
            received_at=T0,
            payload={},
            tries=0,
        )
        session.add(row)
        session.flush()
        status_id = row.id
    with db.transaction() as session:
        result = apply_webhook_status(session, status_id, T0 + timedelta(seconds=1))
    assert result in (Result.PARKED, Result.UNMATCHED)
    with db.transaction() as session:
        stored = session.get(WebhookStatus, status_id, populate_existing=True)
        assert stored is not None and stored.message_id is None
        theirs = session.get(Message, message_id, populate_existing=True)
        assert theirs is not None and theirs.status == "sent" and theirs.read_at is None
        events = session.scalars(
            select(MessageEvent.kind).where(
                MessageEvent.message_id == message_id, MessageEvent.source == "webhook"
            )
        ).all()
    assert events == []
