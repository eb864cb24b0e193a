"""`/webhooks/twilio/<identity_id>` with real signatures: Twilio's documented callbacks,
applied through the same reconciler as WhatsApp's; forged ones refused with nothing kept."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select, text

from app.db import Database
from app.models import ConversationWindow, MessageEvent, WebhookDelivery, WebhookStatus
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message

from ..conftest import T0
from ..factories import World, make_message, message
from .twilio_world import (
    LEASE,
    MESSAGE_SID,
    fixture,
    make_twilio_world,
    path_of,
    post,
    sent_message,
)


@pytest.fixture
def world(db: Database) -> World:
    return make_twilio_world(db)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def count(db: Database, model: type) -> int:
    with db.transaction() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def test_the_documented_delivered_and_read_callbacks_move_a_message_forward(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world)
    for name in ("status_delivered.json", "status_read.json"):
        response = post(client, world.identity_id, fixture(name))
        assert response.status_code == 200, response.get_json()
        assert response.get_json()["results"] == {"duplicate": 0, "applied": 1}
    row = message(db, message_id)
    assert row.status == "read" and row.delivered_at is not None and row.read_at is not None
    with db.transaction() as session:
        deliveries = session.scalars(select(WebhookDelivery)).all()
    assert [d.provider for d in deliveries] == ["twilio", "twilio"]
    assert "MessageStatus=delivered" in deliveries[0].body  # the raw form, kept verbatim


def test_undelivered_fails_the_message_with_the_error_code_verbatim(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world)
    response = post(client, world.identity_id, fixture("status_undelivered.json"))
    assert response.status_code == 200, response.get_json()
    row = message(db, message_id)
    assert row.status == "failed"
    assert row.failure_class == "permanent"
    assert row.last_error is not None and row.last_error["code"] == 63016


@pytest.mark.parametrize("step", ["queued", "accepted", "scheduled", "sending"])
def test_twilios_own_steps_below_sent_are_recorded_and_change_nothing(
    client: FlaskClient, db: Database, world: World, step: str
) -> None:
    message_id = sent_message(db, world)
    fields = fixture("status_delivered.json") | {"MessageStatus": step, "SmsStatus": step}
    response = post(client, world.identity_id, fields)
    assert response.status_code == 200
    assert response.get_json()["results"] == {"duplicate": 0, "ignored": 1}
    assert message(db, message_id).status == "sent"
    assert count(db, WebhookStatus) == 1


def test_a_duplicated_callback_is_a_duplicate_and_a_late_one_never_moves_back(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world)
    read = fixture("status_read.json")
    assert post(client, world.identity_id, read).get_json()["results"]["applied"] == 1
    again = post(client, world.identity_id, read).get_json()["results"]
    assert again == {"duplicate": 1}
    late = post(client, world.identity_id, fixture("status_delivered.json"))
    assert late.status_code == 200
    assert message(db, message_id).status == "read"


def test_a_callback_that_beats_the_send_answer_is_matched_by_the_signed_correlation_id(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = make_message(db, world, recipient="16505551234")
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", T0)
    correlation_id = message(db, message_id).correlation_id
    assert correlation_id
    response = post(
        client, world.identity_id, fixture("status_delivered.json"), correlation_id=correlation_id
    )
    assert response.status_code == 200, response.get_json()
    row = message(db, message_id)
    assert row.status == "delivered" and row.provider_message_id == MESSAGE_SID


def test_an_incoming_message_opens_the_window_on_that_identity(
    client: FlaskClient, db: Database, world: World
) -> None:
    response = post(client, world.identity_id, fixture("inbound_text.json"))
    assert response.status_code == 200 and response.get_json()["inbound"] == 1
    with db.transaction() as session:
        window = session.scalars(select(ConversationWindow)).one()
    assert (window.identity_id, window.recipient) == (world.identity_id, "16505551234")


def refusals(db: Database) -> tuple[int, int, int]:
    return count(db, WebhookDelivery), count(db, WebhookStatus), count(db, MessageEvent)


def test_forged_tampered_and_wrongly_keyed_callbacks_are_refused_with_nothing_kept(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world)
    other = make_twilio_world(db, name="other", sid="AC" + "Y" * 32, token="other-token")
    before = refusals(db)
    read = fixture("status_read.json")
    answers = [
        # No signature at all, and a made-up one.
        client.post(path_of(world.identity_id), data=urlencode(read), headers={}),
        post(client, world.identity_id, read, signature="bm90IGEgc2lnbmF0dXJl"),
        # Signed with another identity's Auth Token.
        post(client, world.identity_id, read, token="other-token"),
        # A field changed after signing.
        post(client, world.identity_id, read, signed_fields=read | {"MessageStatus": "sent"}),
        # Signed for another URL: another identity's path, or another query string.
        post(client, world.identity_id, read, signed_path=path_of(other.identity_id)),
        post(
            client,
            world.identity_id,
            read,
            correlation_id="ratchet:1:1:x",
            signed_path=path_of(world.identity_id, "ratchet:1:1:y"),
        ),
        # Correctly signed by the other account, but sent to ours; and ours sent to theirs.
        post(client, world.identity_id, read | {"AccountSid": other_sid()}, token="other-token"),
        post(client, other.identity_id, read),
        # Signed with our token but naming another account: not a callback of ours.
        post(client, world.identity_id, read | {"AccountSid": other_sid()}),
        # Addressed to an identity that does not exist.
        post(client, 999_999, read),
    ]
    # Past any id (64 bits): no route matches such an id at all.
    assert post(client, 2**70, read).status_code == 404
    assert [a.status_code for a in answers] == [401] * len(answers)
    assert {a.get_json()["error"] for a in answers} == {
        "the request is not signed by the Twilio identity it is addressed to"
    }
    assert refusals(db) == before
    assert message(db, message_id).status == "sent"


def other_sid() -> str:
    return "AC" + "Y" * 32


def test_the_same_account_sid_under_two_senders_is_two_identities(db: Database) -> None:
    first = make_twilio_world(db)
    second = make_twilio_world(db, name="acme-2", sender="whatsapp:+14155230000")
    assert first.identity_id != second.identity_id


def test_a_body_that_is_not_form_data_is_a_400_before_any_lookup(
    client: FlaskClient, db: Database, world: World
) -> None:
    response = client.post(
        path_of(world.identity_id),
        data=b"\xff\xfe{not form",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 400
    assert count(db, WebhookDelivery) == 0


def test_an_auth_token_this_secret_key_cannot_read_verifies_nothing(
    client: FlaskClient, db: Database, world: World
) -> None:
    with db.transaction() as session:
        session.execute(text("UPDATE identities SET token_encrypted = 'not-a-fernet-token'"))
    response = post(client, world.identity_id, fixture("status_read.json"))
    assert response.status_code == 401
    assert count(db, WebhookDelivery) == 0
