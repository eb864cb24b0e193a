"""The send API for Messenger and Instagram identities: PSIDs, text only, the tag."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from app.clock import utcnow
from app.db import Database
from app.models import Message
from app.repo.windows import open_window

from ..factories import World, make_world

PSID = "1254477777772919"


@pytest.fixture(params=["messenger", "instagram"])
def page(request: pytest.FixtureRequest, db: Database) -> World:
    return make_world(db, provider=request.param, account_id="1067280970047460")


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def post(client: FlaskClient, world: World, **body: object):
    payload = {"identity_id": world.identity_id, "to": PSID, "text": "hi"} | body
    return client.post(
        "/v1/messages", json=payload, headers={"Authorization": f"Bearer {world.api_key}"}
    )


def stored(db: Database) -> list[Message]:
    with db.transaction() as session:
        return list(session.scalars(select(Message).order_by(Message.id)))


def test_a_text_to_a_psid_is_accepted_and_takes_the_reply_lane_inside_the_window(
    client: FlaskClient, db: Database, page: World
) -> None:
    assert post(client, page).get_json()["lane"] == "campaign"  # the customer never wrote
    with db.transaction() as session:
        open_window(session, page.identity_id, PSID, utcnow() - timedelta(hours=1))
    response = post(client, page, idempotency_key="k2")
    assert response.status_code == 201, response.get_json()
    data = response.get_json()
    assert (data["to"], data["lane"], data["tag"]) == (PSID, "reply", None)


def test_a_template_is_a_clear_422_and_nothing_is_stored(
    client: FlaskClient, db: Database, page: World
) -> None:
    response = post(client, page, text=None, template={"name": "shipped", "language": "en_US"})
    assert response.status_code == 422
    assert response.get_json()["field"] == "template"
    assert "send text only" in response.get_json()["error"]
    assert stored(db) == []


def test_the_human_agent_tag_is_stored_and_part_of_the_request(
    client: FlaskClient, db: Database, page: World
) -> None:
    first = post(client, page, tag="HUMAN_AGENT", idempotency_key="agent-1")
    assert first.status_code == 201 and first.get_json()["tag"] == "HUMAN_AGENT"
    assert [row.tag for row in stored(db)] == ["HUMAN_AGENT"]
    # The same key without the tag is a different request.
    untagged = post(client, page, idempotency_key="agent-1")
    assert untagged.status_code == 422 and untagged.get_json()["existing_id"]
    assert post(client, page, tag="PROMOTION").status_code == 400  # not a tag we send


def test_a_tag_for_a_whatsapp_identity_is_a_clear_422(client: FlaskClient, db: Database) -> None:
    world = make_world(db)
    response = post(client, world, to="15551234567", tag="HUMAN_AGENT")
    assert response.status_code == 422 and response.get_json()["field"] == "tag"
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Message)) == 0


def test_a_recipient_that_is_no_user_id_is_a_400(client: FlaskClient, page: World) -> None:
    response = post(client, page, to="not a psid")
    assert response.status_code == 400 and response.get_json()["field"] == "to"
