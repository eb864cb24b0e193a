"""Retention reaches the callbacks: once past the tenant's days, delivered and given-up
callbacks go with their attempts (the recipient, the provider's words, the receiver's
answers); pending ones and newer ones stay, and the next change numbers on."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select

from app.callback_models import DELIVERED, GAVE_UP, PENDING, Callback, CallbackAttempt
from app.crypto import SecretBox
from app.db import Database
from app.lifecycle import Source, Status
from app.repo import callback_outbox as outbox
from app.repo.callback_endpoints import EVENTS, create_endpoint
from app.repo.transitions import apply_status

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_world
from ..jobs.retention_world import purge_all_due
from ..meta import PHONE_NUMBER_ID
from ..whatsapp_world import SECRET, sent_message
from .conftest import failed_message


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET, verify_token="vt-1")


def answer(db: Database, endpoint_id: int, status: int, now: datetime) -> None:
    with db.transaction() as session:
        for claimed in outbox.claim_due(session, endpoint_id, now, 10, timedelta(seconds=30)):
            outbox.record_answer(
                session,
                claimed,
                endpoint_id,
                outbox.Answer(status, 5, "receiver's words"),
                now,
                retry_window=timedelta(seconds=1),  # a failure gives up at once
                disable_after=50,
            )


def states(db: Database) -> list[tuple[int, str]]:
    with db.transaction() as session:
        rows = session.execute(select(Callback.message_id, Callback.state).order_by(Callback.id))
        return [(row.message_id, row.state) for row in rows]


def test_finished_callbacks_past_retention_go_with_their_attempts(
    db: Database, world: World
) -> None:
    with db.transaction() as session:
        made, _ = create_endpoint(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=world.tenant_id,
            url="https://hooks.example.com/ratchet",
            host="hooks.example.com",
            events=list(EVENTS),
            now=T0,
        )
        endpoint_id = made.id
    taken = sent_message(db, world, "wamid.K1")
    answer(db, endpoint_id, 200, T0 + timedelta(seconds=2))
    refused = sent_message(db, world, "wamid.K2")
    answer(db, endpoint_id, 500, T0 + timedelta(seconds=3))
    waiting = sent_message(db, world, "wamid.K3")
    assert states(db) == [(taken, DELIVERED), (refused, GAVE_UP), (waiting, PENDING)]
    with db.transaction() as session:
        done = Callback.state != PENDING
        written = session.scalar(select(func.max(Callback.created_at)).where(done))
    assert written is not None

    # Within the 30 days nothing goes.
    assert purge_all_due(db, written + timedelta(days=29)).callbacks == 0
    assert len(states(db)) == 3

    assert purge_all_due(db, written + timedelta(days=31)).callbacks == 2
    assert states(db) == [(waiting, PENDING)]
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(CallbackAttempt)) == 0

    # A pending one stays however old: it is not done with.
    assert purge_all_due(db, written + timedelta(days=400)).callbacks == 0
    assert states(db) == [(waiting, PENDING)]

    # The sequence does not restart for a message whose callbacks went.
    with db.transaction() as session:
        apply_status(
            session,
            taken,
            Status.DELIVERED,
            Source.WEBHOOK,
            T0 + timedelta(seconds=9),
            provider_time=T0 + timedelta(seconds=9),
            dedupe_key="retention:delivered",
        )
        sequence = session.scalar(select(Callback.sequence).where(Callback.message_id == taken))
    assert sequence == 2


def test_a_purged_message_takes_the_providers_words_out_of_its_callbacks(
    db: Database, world: World
) -> None:
    with db.transaction() as session:
        create_endpoint(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=world.tenant_id,
            url="https://hooks.example.com/ratchet",
            host="hooks.example.com",
            events=list(EVENTS),
            now=T0,
        )
    message_id = failed_message(db, world)
    (before,) = [row.payload for row in rows_of(db, message_id)]
    assert before["data"]["error"]["message"] == "Message Undeliverable."
    assert purge_all_due(db, T0 + timedelta(days=31)).messages == 1
    (row,) = rows_of(db, message_id)
    assert row.state == PENDING  # still to go out, without the words
    assert "message" not in row.payload["data"]["error"]
    assert row.payload["data"]["error"]["code"] == 131026


def rows_of(db: Database, message_id: int) -> list[Callback]:
    with db.transaction() as session:
        return list(session.scalars(select(Callback).where(Callback.message_id == message_id)))
