"""The outbox after review (migration 0021): the retry window runs from the row's writing,
not from the provider's time; a message's sequence outlives its endpoint; a message's own
`status_callback` equal to a subscribed endpoint's URL is not written twice, and follows
its endpoint's events."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.callback_models import PENDING, Callback, MessageCallbackUrl
from app.crypto import SecretBox
from app.db import Database
from app.lifecycle import Source, Status
from app.repo import callback_outbox as outbox
from app.repo.callback_endpoints import EVENTS, create_endpoint, delete_endpoint, get_endpoint
from app.repo.transitions import apply_status

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_world
from ..meta import PHONE_NUMBER_ID
from ..whatsapp_world import SECRET, sent_message

URL = "https://hooks.example.com/ratchet"


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET, verify_token="vt-1")


def endpoint(db: Database, world: World, events: list[str] | None = None, url: str = URL) -> int:
    with db.transaction() as session:
        made, _ = create_endpoint(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=world.tenant_id,
            url=url,
            host="hooks.example.com",
            events=events or list(EVENTS),
            now=T0,
        )
        return made.id


def change(db: Database, message_id: int, word: str, now_s: float, provider_s: float) -> None:
    with db.transaction() as session:
        apply_status(
            session,
            message_id,
            Status(word),
            Source.WEBHOOK,
            T0 + timedelta(seconds=now_s),
            provider_time=T0 + timedelta(seconds=provider_s),
            dedupe_key=f"review:{message_id}:{word}",
        )


def rows(db: Database, message_id: int) -> list[Callback]:
    with db.transaction() as session:
        query = select(Callback).where(Callback.message_id == message_id)
        return list(session.scalars(query.order_by(Callback.id)))


def test_a_change_applied_late_is_retried_for_a_day_from_its_writing(
    db: Database, world: World
) -> None:
    """A 'delivered' carrying a provider time 25 h before it is applied: retried after a
    503, where the window counted from the provider's time gave it up at once."""
    message_id = sent_message(db, world, "wamid.R1")
    endpoint_id = endpoint(db, world, ["message.delivered"])
    change(db, message_id, "delivered", 10, -25 * 3600)
    now = T0 + timedelta(seconds=11)
    with db.transaction() as session:
        (claimed,) = outbox.claim_due(session, endpoint_id, now, 10, timedelta(seconds=30))
        outbox.record_answer(
            session,
            claimed,
            endpoint_id,
            outbox.Answer(503, 5, "busy"),
            now,
            retry_window=timedelta(hours=24),
            disable_after=50,
        )
    (row,) = rows(db, message_id)
    assert row.state == PENDING and row.attempts == 1 and row.next_attempt_at > now
    # The provider's time is still what the payload says.
    assert row.payload["timestamp"].startswith((T0 - timedelta(hours=25)).strftime("%Y-%m-%dT"))


def test_the_sequence_goes_on_when_the_endpoint_is_deleted_and_registered_again(
    db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.R2")
    first = endpoint(db, world)
    change(db, message_id, "delivered", 5, 5)
    assert [row.sequence for row in rows(db, message_id)] == [1]
    with db.transaction() as session:
        found = get_endpoint(session, world.tenant_id, first)
        assert found is not None
        delete_endpoint(session, found)
    endpoint(db, world)  # the same URL again, a new secret
    change(db, message_id, "read", 6, 6)
    (row,) = rows(db, message_id)
    assert row.sequence == 2 and row.payload["data"]["sequence"] == 2


def test_a_status_callback_equal_to_a_subscribed_endpoint_gets_one_row(
    db: Database, world: World
) -> None:
    endpoint_id = endpoint(db, world, ["message.delivered", "message.read"])
    message_id = sent_message(db, world, "wamid.R3")
    with db.transaction() as session:
        session.add(MessageCallbackUrl(message_id=message_id, endpoint_id=endpoint_id, url=URL))
    change(db, message_id, "delivered", 5, 5)
    written = rows(db, message_id)
    assert [(row.endpoint_id, row.url, row.event) for row in written] == [
        (endpoint_id, None, "message.delivered")
    ]


def test_a_status_callback_follows_the_events_of_its_hosts_endpoint(
    db: Database, world: World
) -> None:
    endpoint_id = endpoint(db, world, ["message.read"])
    message_id = sent_message(db, world, "wamid.R4")
    own = "https://hooks.example.com/own"
    with db.transaction() as session:
        session.add(MessageCallbackUrl(message_id=message_id, endpoint_id=endpoint_id, url=own))
    change(db, message_id, "delivered", 5, 5)  # not an event the endpoint takes
    assert rows(db, message_id) == []
    change(db, message_id, "read", 6, 6)
    assert [(row.url, row.event) for row in rows(db, message_id)] == [
        (None, "message.read"),
        (own, "message.read"),
    ]
