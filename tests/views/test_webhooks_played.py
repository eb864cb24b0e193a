"""WhatsApp's `played` (a voice message played, which comes after `read`): through the guard
it counts as `read`, so a message sent and then played without a separate `read` is read."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database

from ..conftest import at
from ..factories import World, make_world, message
from ..meta import PHONE_NUMBER_ID, encode, status, status_body
from ..whatsapp_world import SECRET, deliver, sent_message, webhook_events


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def test_a_played_status_after_sent_moves_the_message_to_read(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.VOICE")
    response = deliver(client, encode(status_body([status("wamid.VOICE", "played", at(9))])))
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["results"]["applied"] == 1
    row = message(db, message_id)
    assert row.status == "read" and row.read_at == at(9)


def test_a_played_after_read_is_recorded_and_changes_nothing(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.VOICE2")
    deliver(client, encode(status_body([status("wamid.VOICE2", "read", at(5))])))
    response = deliver(client, encode(status_body([status("wamid.VOICE2", "played", at(9))])))
    assert response.get_json()["results"]["refused"] == 1
    row = message(db, message_id)
    assert row.status == "read" and row.read_at == at(5)
    played = [e for e in webhook_events(db, message_id) if e.detail["status"] == "played"]
    assert [(e.applied, e.refusal) for e in played] == [(False, "same")]
