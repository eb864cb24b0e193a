"""Input built to break the parser or the database gets a clear 4xx, never a 500: JSON that
`json.loads` refuses in other ways than a syntax error, ids past 64 bits, NUL characters,
and app secrets that are not ASCII."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from app.db import Database
from app.models import Message, WebhookDelivery
from app.sendrequest import RequestError, normalise_recipient

from ..conftest import at
from ..factories import World, make_world, message
from ..meta import PHONE_NUMBER_ID, encode, sign, status, status_body
from ..whatsapp_world import sent_message

# Both fit in 64 KiB, so only the parser can refuse them.
DEEP = b'{"identity_id": 1, "to": "15551234567", "text": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
HUGE_NUMBER = b'{"identity_id": ' + b"7" * 5_000 + b', "to": "15551234567", "text": "hi"}'
HOSTILE_JSON = {"nested too deeply": DEEP, "an integer over 4,300 digits": HUGE_NUMBER}


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def post_raw(client: FlaskClient, world: World, raw: bytes, **headers: str):
    return client.post(
        "/v1/messages",
        data=raw,
        content_type="application/json",
        headers={"Authorization": f"Bearer {world.api_key}", **headers},
    )


def post_json(client: FlaskClient, world: World, body: object, **headers: str):
    headers = {"Authorization": f"Bearer {world.api_key}", **headers}
    return client.post("/v1/messages", json=body, headers=headers)


def count(db: Database, model: type) -> int:
    with db.transaction() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


# JSON that json.loads refuses with something other than a syntax error -------------------


@pytest.mark.parametrize("case", HOSTILE_JSON, ids=list(HOSTILE_JSON))
def test_json_the_parser_refuses_is_a_400_on_the_api_and_stores_nothing(
    client: FlaskClient, world: World, db: Database, case: str
) -> None:
    response = post_raw(client, world, HOSTILE_JSON[case])
    assert response.status_code == 400
    assert "not valid JSON" in response.get_json()["error"]
    assert count(db, Message) == 0


@pytest.mark.parametrize("case", HOSTILE_JSON, ids=list(HOSTILE_JSON))
def test_json_the_parser_refuses_is_a_400_on_the_unauthenticated_webhook(
    client: FlaskClient, db: Database, case: str
) -> None:
    response = client.post(
        "/webhooks/whatsapp", data=HOSTILE_JSON[case], content_type="application/json"
    )
    assert response.status_code == 400
    assert "not a whatsapp webhook" in response.get_json()["error"]
    assert count(db, WebhookDelivery) == 0


# Ids past 64 bits -----------------------------------------------------------------------


@pytest.mark.parametrize("identity_id", [2**63, 10**30], ids=["2^63", "10^30"])
def test_an_identity_id_past_64_bits_is_the_same_422_as_an_unknown_one(
    client: FlaskClient, world: World, db: Database, identity_id: int
) -> None:
    body = {"identity_id": identity_id, "to": "15551234567", "text": "hi"}
    response = post_json(client, world, body)
    unknown = post_json(client, world, {**body, "identity_id": 999_999})
    assert response.status_code == unknown.status_code == 422
    assert response.get_json()["field"] == "identity_id"
    assert count(db, Message) == 0


@pytest.mark.parametrize("message_id", [2**63, 10**40], ids=["2^63", "10^40"])
def test_a_message_id_past_64_bits_is_404(
    client: FlaskClient, world: World, message_id: int
) -> None:
    response = client.get(
        f"/v1/messages/{message_id}", headers={"Authorization": f"Bearer {world.api_key}"}
    )
    assert response.status_code == 404 and response.get_json()["error"]


# NUL characters -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["text", "idempotency_key"])
def test_a_nul_character_in_the_body_is_a_400_naming_the_field(
    client: FlaskClient, world: World, db: Database, field: str
) -> None:
    body = {"identity_id": world.identity_id, "to": "15551234567", "text": "hi"}
    body[field] = "before\u0000after"
    response = post_json(client, world, body)
    assert response.status_code == 400
    data = response.get_json()
    assert data["field"] == field and field in data["error"] and "NUL" in data["error"]
    assert count(db, Message) == 0


def test_a_nul_character_in_the_idempotency_key_header_is_a_400_naming_the_field(
    client: FlaskClient, world: World, db: Database
) -> None:
    body = {"identity_id": world.identity_id, "to": "15551234567", "text": "hi"}
    response = post_json(client, world, body, **{"Idempotency-Key": "k\u0000"})
    assert response.status_code == 400
    assert response.get_json()["field"] == "idempotency_key"
    assert count(db, Message) == 0


# App secrets that are not ASCII ----------------------------------------------------------

SNOWMAN = "s\u00e9cret-\u2603"  # the Meta app secret of both numbers below


@pytest.fixture
def two_numbers(db: Database) -> tuple[World, World]:
    ours = make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SNOWMAN)
    also = make_world(db, name="acme-2", account_id="2000002", app_secret=SNOWMAN)
    return ours, also


def both_numbers_body() -> bytes:
    body = status_body([status("wamid.SNOW", "delivered", at(5))])
    body["entry"].append(status_body([status("wamid.X", "read", at(5))], "2000002")["entry"][0])
    return encode(body)


def deliver(client: FlaskClient, raw: bytes, secret: str):
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, secret)}
    return client.post("/webhooks/whatsapp", data=raw, headers=headers)


def test_a_delivery_signed_with_a_shared_non_ascii_app_secret_verifies(
    client: FlaskClient, db: Database, two_numbers: tuple[World, World]
) -> None:
    message_id = sent_message(db, two_numbers[0], "wamid.SNOW")
    response = deliver(client, both_numbers_body(), SNOWMAN)
    assert response.status_code == 200, response.get_json()
    assert message(db, message_id).status == "delivered"


def test_a_delivery_signed_with_another_non_ascii_secret_does_not_verify(
    client: FlaskClient, db: Database, two_numbers: tuple[World, World]
) -> None:
    assert deliver(client, both_numbers_body(), "s\u00e9cret-\u2602").status_code == 401
    assert count(db, WebhookDelivery) == 0


def test_numbers_with_different_non_ascii_secrets_in_one_delivery_are_401(
    client: FlaskClient, db: Database
) -> None:
    make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SNOWMAN)
    make_world(db, name="acme-2", account_id="2000002", app_secret="\u00fcber-geheim")
    assert deliver(client, both_numbers_body(), SNOWMAN).status_code == 401
    assert count(db, WebhookDelivery) == 0


# A trailing newline ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["messenger", "instagram"])
def test_a_page_scoped_recipient_with_a_trailing_newline_is_refused(provider: str) -> None:
    # `$` in a regex also matches before a final newline: the id must match whole.
    assert normalise_recipient(provider, "psid_123") == "psid_123"
    with pytest.raises(RequestError) as refused:
        normalise_recipient(provider, "psid_123\n")
    assert refused.value.field == "to"
