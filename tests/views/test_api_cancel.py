"""`POST /v1/messages/<id>/cancel`: 200 while queued, 409 with the current state once a
worker has it, 404 for another tenant's message, 400 for a body it cannot read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Message, MessageEvent
from app.repo.claims import claim_message

from ..conftest import T0
from ..factories import World, make_message, make_world


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def cancel(client: FlaskClient, world: World, message_id: int, **kwargs: object):
    return client.post(
        f"/v1/messages/{message_id}/cancel",
        headers={"Authorization": f"Bearer {world.api_key}"},
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_queued_message_is_canceled_and_never_claimed_after(
    client: FlaskClient, world: World, db: Database
) -> None:
    message_id = make_message(db, world)
    response = cancel(client, world, message_id, json={"reason": "order withdrawn"})
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert (body["status"], body["failure_class"]) == ("failed", "canceled")
    assert body["last_error"]["message"] == "order withdrawn"
    with db.transaction() as session:
        assert (
            claim_message(session, message_id, T0 + timedelta(seconds=1), timedelta(seconds=25))
            is None
        )
        event = session.scalars(
            select(MessageEvent).where(
                MessageEvent.message_id == message_id, MessageEvent.kind == "cancel"
            )
        ).one()
        audit = session.scalars(select(AuditEntry)).one()
    assert event.applied and event.to_status == "failed"
    assert (audit.action, audit.target, audit.tenant_id) == (
        "message.cancel",
        f"message:{message_id}",
        world.tenant_id,
    )
    assert audit.actor == "api:acme" and audit.detail and audit.detail["via"] == "api"


def test_a_claimed_message_answers_409_with_its_current_state(
    client: FlaskClient, world: World, db: Database
) -> None:
    message_id = make_message(db, world)
    with db.transaction() as session:
        assert claim_message(session, message_id, T0, timedelta(seconds=25)) is not None
    response = cancel(client, world, message_id)
    assert response.status_code == 409
    body = response.get_json()
    assert body["status"] == "sending"
    assert "already claimed by a worker" in body["error"]
    assert body["message"]["id"] == message_id
    with db.transaction() as session:
        assert session.get(Message, message_id, populate_existing=True).status == "sending"  # type: ignore[union-attr]


def test_a_canceled_message_canceled_again_is_a_409_saying_it_failed(
    client: FlaskClient, world: World, db: Database
) -> None:
    message_id = make_message(db, world)
    assert cancel(client, world, message_id).status_code == 200
    again = cancel(client, world, message_id)
    assert again.status_code == 409
    assert again.get_json()["status"] == "failed"


def test_another_tenants_message_is_not_found_and_stays_queued(
    client: FlaskClient, world: World, db: Database
) -> None:
    other = make_world(db, name="other", account_id="2000002", verify_token="v-o")
    theirs = make_message(db, other)
    response = cancel(client, world, theirs)
    assert response.status_code == 404
    with db.transaction() as session:
        assert session.get(Message, theirs, populate_existing=True).status == "queued"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"data": "{not json", "content_type": "application/json"}, "not valid JSON"),
        ({"data": "reason=x", "content_type": "text/plain"}, "Content-Type: application/json"),
        ({"json": {"reason": "x", "force": True}}, "only be an object with a `reason`"),
        ({"json": {"reason": ""}}, "non-empty string"),
        ({"json": {"reason": "a\x00b"}}, "NUL"),
    ],
)
def test_a_body_it_cannot_read_is_a_400_and_cancels_nothing(
    client: FlaskClient, world: World, db: Database, kwargs: dict[str, object], words: str
) -> None:
    message_id = make_message(db, world)
    response = cancel(client, world, message_id, **kwargs)
    assert response.status_code == 400
    assert words in response.get_json()["error"]
    with db.transaction() as session:
        assert session.get(Message, message_id, populate_existing=True).status == "queued"  # type: ignore[union-attr]


def test_without_a_key_it_is_a_401(client: FlaskClient, world: World, db: Database) -> None:
    message_id = make_message(db, world)
    assert client.post(f"/v1/messages/{message_id}/cancel").status_code == 401


def test_the_openapi_document_describes_the_cancel_and_its_409(client: FlaskClient) -> None:
    paths = client.get("/v1/openapi.json").get_json()["paths"]
    operation = paths["/v1/messages/{message_id}/cancel"]["post"]
    assert operation["operationId"] == "cancelMessage"
    assert {"200", "404", "409"} <= set(operation["responses"])
