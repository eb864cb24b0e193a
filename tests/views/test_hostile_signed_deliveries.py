"""Bad input that would reach the database unvalidated: a clear 4xx from the API, and a 2xx
for a signed delivery with its raw body kept (a non-2xx makes Meta redeliver it for ever)."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from app.db import Database
from app.models import Message, WebhookDelivery

from ..conftest import at
from ..factories import World, make_world
from ..meta import PHONE_NUMBER_ID, encode, sign, status, status_body
from ..whatsapp_world import sent_message

SECRET = "meta-app-secret"


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    app.config["PROPAGATE_EXCEPTIONS"] = False
    return app.test_client()


def post_raw(client, world, raw: bytes):
    return client.post(
        "/v1/messages",
        data=raw,
        content_type="application/json",
        headers={"Authorization": f"Bearer {world.api_key}"},
    )


HEAD = b'{"identity_id": %d, "to": "15551234567", '
API_BODIES = {
    "template name with NUL": HEAD + b'"template": {"name": "a\\u0000b", "language": "en"}}',
    "template component NUL": HEAD
    + b'"template": {"name": "t", "language": "en", '
    + b'"components": [{"type": "body", "text": "a\\u0000b"}]}}',
    "template component NaN": HEAD
    + b'"template": {"name": "t", "language": "en", "components": [{"type": "body", "n": NaN}]}}',
    "text lone surrogate": HEAD + b'"text": "hi \\ud800"}',
    "idempotency key lone surrogate": HEAD + b'"text": "hi", "idempotency_key": "k\\udc00"}',
}


@pytest.mark.parametrize("case", API_BODIES, ids=list(API_BODIES))
def test_api_input_the_database_cannot_hold_is_a_4xx_and_stores_nothing(
    client: FlaskClient, world: World, db: Database, case: str
) -> None:
    raw = API_BODIES[case] % world.identity_id
    response = post_raw(client, world, raw)
    assert 400 <= response.status_code < 500, response.get_data(as_text=True)
    assert response.get_json()["error"]
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Message)) == 0


def deliver(client, raw: bytes):
    return client.post(
        "/webhooks/whatsapp",
        data=raw,
        headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)},
    )


def _body(mutate):
    obj = status("wamid.X1", "delivered", at(5))
    mutate(obj)
    return encode(status_body([obj]))


def _set(key, value):
    def m(obj):
        obj[key] = value

    return m


def _err_code(value):
    def m(obj):
        obj["status"] = "failed"
        obj["errors"] = [{"code": value, "title": "x"}]

    return m


WEBHOOK_CASES = {
    "id of 201 chars": lambda: _body(_set("id", "w" * 201)),
    "status word of 21 chars": lambda: _body(_set("status", "s" * 21)),
    "NUL in id": lambda: _body(_set("id", "wamid.\u0000")),
    "NUL in callback data": lambda: _body(_set("biz_opaque_callback_data", "x\u0000")),
    "lone surrogate in id": lambda: encode(
        status_body([status("wamid.X1", "delivered", at(5))])
    ).replace(b"wamid.X1", b"wamid.\\ud800"),
    "NaN in a status field": lambda: encode(
        status_body([status("wamid.X1", "delivered", at(5))])
    ).replace(b'"status":"delivered"', b'"status":"delivered","pricing":NaN'),
    "Infinity as error code": lambda: encode(
        status_body(
            [{**status("wamid.X1", "failed", at(5)), "errors": [{"code": 1, "title": "x"}]}]
        )
    ).replace(b'"code":1', b'"code":Infinity'),
    "unknown routing id of 101 chars": None,
    "inbound sender of 101 chars": None,
}


def _unknown_long_route():
    body = status_body([status("wamid.X1", "delivered", at(5))])
    body["entry"].append(status_body([status("wamid.Y", "read", at(5))], "9" * 101)["entry"][0])
    return encode(body)


def _inbound_long_sender():
    body = status_body([])
    value = body["entry"][0]["changes"][0]["value"]
    value.pop("statuses")
    value["messages"] = [
        {
            "from": "1" * 101,
            "id": "wamid.IN",
            "timestamp": "1764500000",
            "type": "text",
            "text": {"body": "hi"},
        }
    ]
    return encode(body)


WEBHOOK_CASES["unknown routing id of 101 chars"] = _unknown_long_route
WEBHOOK_CASES["inbound sender of 101 chars"] = _inbound_long_sender


@pytest.mark.parametrize("case", WEBHOOK_CASES, ids=list(WEBHOOK_CASES))
def test_a_signed_delivery_with_values_no_real_one_has_is_never_a_500(
    client: FlaskClient, world: World, db: Database, case: str
) -> None:
    sent_message(db, world, "wamid.X1")
    raw = WEBHOOK_CASES[case]()
    response = deliver(client, raw)
    assert response.status_code < 500, response.get_data(as_text=True)
    with db.transaction() as session:
        kept = session.scalar(select(func.count()).select_from(WebhookDelivery))
    if response.status_code < 300:
        assert kept == 1  # acknowledged, so kept verbatim
    else:
        assert response.status_code == 400 and kept == 0  # not JSON: refused unverified


@pytest.mark.parametrize(
    "routing_id",
    [b'"\\ud800"', b'"\\udfff1065"', b'"\\uDBFF"', b'"1065\\uDc01"', b'"\\ud83d\\ud83d"'],
)
def test_an_unsigned_delivery_naming_a_lone_surrogate_is_a_400(
    client: FlaskClient, db: Database, routing_id: bytes
) -> None:
    raw = (
        b'{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":'
        b'"messages","value":{"metadata":{"phone_number_id":'
        + routing_id
        + b'},"statuses":[]}}]}]}'
    )
    response = client.post(
        "/webhooks/whatsapp", data=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and "surrogate" in response.get_json()["error"]


@pytest.mark.parametrize("key", ["rk_abc.def\x00", "rk_\x00.x", "rk_abc.dé"])
def test_an_api_key_with_characters_no_key_has_is_a_401(
    client: FlaskClient, world: World, key: str
) -> None:
    response = client.post("/v1/messages", json={}, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 401
