"""Correlation ids carry a keyed part: a status can neither guess one nor borrow another
installation's, and never moves a message that has no attempt in its cycle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.correlation import derive_key, make_correlation_id, parse_correlation_id
from app.db import Database
from app.models import Message
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.inbox import IncomingStatus, store_delivery, store_statuses
from app.repo.status_apply import apply_webhook_status

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_message, make_world

KEY = derive_key(SECRET_KEY)


def test_a_correlation_id_reads_back_only_under_the_key_it_was_made_with() -> None:
    value = make_correlation_id(KEY, 42, 3)
    assert len(value) <= 64  # the column's width
    assert parse_correlation_id(KEY, value) == (42, 3)
    assert parse_correlation_id(derive_key("another installation's key"), value) is None


@pytest.mark.parametrize(
    "value",
    [
        "ratchet:42:3",  # the old, guessable form
        make_correlation_id(KEY, 42, 3).replace(":42:", ":43:"),  # another message's number
        make_correlation_id(KEY, 42, 3).replace(":3:", ":4:"),  # another cycle
        make_correlation_id(KEY, 42, 3)[:-1] + "0",  # a tag one character off
        "ratchet:" + "9" * 30 + ":1:" + "0" * 24,  # beyond any id we issue
        "ratchet:٤٢:3:" + "0" * 24,  # digits, but not ASCII ones
        "",
        "wamid.something",
    ],
)
def test_anything_but_our_own_correlation_id_is_not_ours(value: str) -> None:
    assert parse_correlation_id(KEY, value) is None


def status_naming(database: Database, world: World, correlation_id: str, wamid: str) -> str:
    incoming = IncomingStatus(
        identity_id=world.identity_id,
        provider="whatsapp",
        provider_message_id=wamid,
        status="delivered",
        provider_time=T0 + timedelta(seconds=5),
        correlation_id=correlation_id,
    )
    with database.transaction() as session:
        delivery = store_delivery(session, "whatsapp", world.identity_id, {}, "{}", T0)
        (status_id,), _ = store_statuses(session, delivery, [incoming], T0)
    with database.transaction() as session:
        return apply_webhook_status(session, status_id, T0 + timedelta(seconds=6))


def state(database: Database, message_id: int) -> tuple[str, str | None]:
    with database.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        return row.status, row.provider_message_id


@pytest.mark.parametrize(
    "forged",
    [
        lambda message_id: f"ratchet:{message_id}:1",
        lambda message_id: make_correlation_id(derive_key("staging's key"), message_id, 1),
    ],
    ids=["guessed", "another-installation"],
)
def test_a_signed_status_with_a_forged_correlation_id_leaves_a_queued_message_alone(
    db: Database, forged
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    assert status_naming(db, world, forged(message_id), "wamid.FORGED") == "parked"
    assert state(db, message_id) == ("queued", None)


def test_a_status_never_applies_to_a_message_with_no_attempt_in_its_cycle(db: Database) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        genuine = session.get(Message, message_id).correlation_id  # type: ignore[union-attr]
    assert genuine is not None
    # Our own id, signed: still nothing of ours can be at the provider for this cycle.
    assert status_naming(db, world, genuine, "wamid.EARLY") == "parked"
    assert state(db, message_id) == ("queued", None)


def test_a_status_with_our_correlation_id_applies_once_the_cycle_has_an_attempt(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, timedelta(seconds=25))
        assert claim is not None
        start_attempt(session, claim, "key", T0)
        genuine = session.get(Message, message_id).correlation_id  # type: ignore[union-attr]
    assert genuine is not None and genuine.startswith(f"ratchet:{message_id}:1:")
    assert status_naming(db, world, genuine, "wamid.OURS") == "applied"
    assert state(db, message_id) == ("delivered", "wamid.OURS")
