"""`/v1/callback-endpoints` and `status_callback`: the secret shown once, a tenant sees only
its own, URLs refused against SSRF with nothing stored, a message's own URL only on a
registered host."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from app.callback_models import CallbackEndpoint, MessageCallbackUrl
from app.crypto import SecretBox
from app.db import Database

from ..conftest import SECRET_KEY, make_app
from ..factories import World, make_world

LOCAL = "http://127.0.0.1:9/hooks"


@pytest.fixture
def app(pg_url: str, redis_url: str) -> Iterator[Flask]:
    made = make_app(pg_url, redis_url, callback_allow_hosts=("127.0.0.1",))
    with made.app_context():
        yield made
    made.extensions["ratchet.db"].dispose()
    made.extensions["ratchet.redis"].close()


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def call(client: FlaskClient, world: World, method: str, path: str, body: Any = None) -> Any:
    headers = {"Authorization": f"Bearer {world.api_key}"}
    return client.open(f"/v1{path}", method=method, json=body, headers=headers)


def stored(db: Database) -> int:
    with db.transaction() as session:
        return int(session.scalar(select(func.count()).select_from(CallbackEndpoint)) or 0)


def test_the_secret_is_shown_at_create_and_roll_only_and_stored_sealed(
    client: FlaskClient, db: Database, world: World
) -> None:
    made = call(client, world, "POST", "/callback-endpoints", {"url": LOCAL})
    assert made.status_code == 201, made.get_json()
    body = made.get_json()
    assert body["secret"].startswith("whsec_") and body["events"][0] == "message.sent"
    shown = call(client, world, "GET", f"/callback-endpoints/{body['id']}").get_json()
    assert "secret" not in shown and shown["url"] == LOCAL
    listed = call(client, world, "GET", "/callback-endpoints").get_json()["endpoints"]
    assert [e["id"] for e in listed] == [body["id"]] and "secret" not in listed[0]
    with db.transaction() as session:
        row = session.get(CallbackEndpoint, body["id"])
        assert row is not None and body["secret"] not in row.secret_sealed
        assert SecretBox(SECRET_KEY).decrypt(row.secret_sealed) == body["secret"]
    rolled = call(client, world, "POST", f"/callback-endpoints/{body['id']}/roll-secret", {})
    assert rolled.status_code == 200
    assert rolled.get_json()["secret"] != body["secret"]
    assert rolled.get_json()["previous_secret_until"] is not None


def test_another_tenant_neither_sees_nor_changes_nor_deletes_an_endpoint(
    client: FlaskClient, db: Database, world: World
) -> None:
    other = make_world(db, name="other", account_id="2000002")
    endpoint_id = call(client, world, "POST", "/callback-endpoints", {"url": LOCAL}).get_json()[
        "id"
    ]
    assert call(client, other, "GET", f"/callback-endpoints/{endpoint_id}").status_code == 404
    assert call(client, other, "GET", "/callback-endpoints").get_json() == {"endpoints": []}
    patched = call(client, other, "PATCH", f"/callback-endpoints/{endpoint_id}", {"enabled": False})
    assert patched.status_code == 404
    assert call(client, other, "DELETE", f"/callback-endpoints/{endpoint_id}").status_code == 404
    changed = call(
        client, world, "PATCH", f"/callback-endpoints/{endpoint_id}", {"events": ["message.read"]}
    )
    assert changed.get_json()["events"] == ["message.read"]
    assert call(client, world, "DELETE", f"/callback-endpoints/{endpoint_id}").status_code == 204
    assert stored(db) == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",  # not https
        "https://user:pass@hooks.example.com/x",  # credentials
        "https://10.1.2.3/x",  # private
        "https://169.254.169.254/latest/meta-data",  # link-local (cloud metadata)
        "https://127.0.0.2/x",  # loopback, not the allowed host
        "https://[::1]/x",
        "https://[::ffff:10.0.0.1]/x",  # a private IPv4 inside IPv6
        "https://localhost/x",
        "https://100.64.0.1/x",  # shared address space
        "ftp://127.0.0.1/x",
        "https://hooks.example.com/a b",
        "not a url",
        12,
    ],
)
def test_a_url_that_could_reach_inside_is_refused_and_nothing_is_stored(
    client: FlaskClient, db: Database, world: World, url: Any
) -> None:
    answer = call(client, world, "POST", "/callback-endpoints", {"url": url})
    assert answer.status_code == 400
    assert answer.get_json()["error"].startswith("url: ")
    assert stored(db) == 0


def test_bad_fields_get_a_400_naming_them(client: FlaskClient, db: Database, world: World) -> None:
    for body, words in (
        ({"url": LOCAL, "events": ["message.bounced"]}, "unknown events"),
        ({"url": LOCAL, "events": []}, "non-empty list"),
        ({"url": LOCAL, "secret": "x"}, "secret: is not a field"),
        ({"events": ["message.read"]}, "url: is required"),
        ({"url": LOCAL, "enabled": "yes"}, "enabled: must be true or false"),
    ):
        answer = call(client, world, "POST", "/callback-endpoints", body)
        assert answer.status_code == 400 and words in answer.get_json()["error"], body
    assert stored(db) == 0


def test_a_message_status_callback_must_be_on_a_registered_host(
    client: FlaskClient, db: Database, world: World
) -> None:
    send = {"identity_id": world.identity_id, "to": "15551234567", "text": "hi"}
    refused = call(
        client, world, "POST", "/messages", {**send, "status_callback": "http://127.0.0.1:9/m"}
    )
    assert refused.status_code == 422 and refused.get_json()["field"] == "status_callback"
    endpoint = call(client, world, "POST", "/callback-endpoints", {"url": LOCAL}).get_json()
    inside = call(
        client, world, "POST", "/messages", {**send, "status_callback": "https://10.0.0.1/"}
    )
    assert inside.status_code == 422
    made = call(
        client, world, "POST", "/messages", {**send, "status_callback": "http://127.0.0.1:9/m?o=1"}
    )
    assert made.status_code == 201, made.get_json()
    with db.transaction() as session:
        rows = list(session.scalars(select(MessageCallbackUrl)))
    assert [(r.message_id, r.endpoint_id, r.url) for r in rows] == [
        (made.get_json()["id"], endpoint["id"], "http://127.0.0.1:9/m?o=1")
    ]


def test_the_openapi_document_describes_the_callback_endpoints(client: FlaskClient) -> None:
    document = client.get("/v1/openapi.json").get_json()
    paths = document["paths"]
    assert set(paths["/v1/callback-endpoints"]) == {"get", "post"}
    assert {"get", "patch", "delete"} <= set(paths["/v1/callback-endpoints/{endpoint_id}"])
    assert "status_callback" in document["components"]["schemas"]["SendRequest"]["properties"]
