"""Where the API and its OpenAPI document disagreed, each case pinned: a keyless call to an
operation that takes the key is a documented 401; text of digits is not the `date-time` the
document asks for (Pydantic read it as Unix time); and `3600.0` is the `integer` the document
says `overlap_seconds` is (JSON Schema counts a number with no fraction as one)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.clock import utcnow
from app.db import Database

from ..conftest import make_app
from ..factories import World
from .api_requests import body, client, count_messages, post, world

__all__ = ["client", "world"]  # the fixtures, imported for these tests

LOCAL = "http://127.0.0.1:9/hooks"
METHODS = ("get", "post", "patch", "put", "delete")


@pytest.fixture
def app(pg_url: str, redis_url: str) -> Iterator[Flask]:
    made = make_app(pg_url, redis_url, callback_allow_hosts=("127.0.0.1",))
    with made.app_context():
        yield made
    made.extensions["ratchet.db"].dispose()
    made.extensions["ratchet.redis"].close()


def keyed_operations(client: FlaskClient) -> list[tuple[str, str, dict]]:
    document = client.get("/v1/openapi.json").get_json()
    found = []
    for path, item in document["paths"].items():
        for method in METHODS:
            operation = item.get(method)
            if operation is not None and operation.get("security") != []:
                found.append((method, path, operation))
    return found


def test_every_operation_that_takes_the_key_documents_the_401_it_answers_without_one(
    client: FlaskClient,
) -> None:
    operations = keyed_operations(client)
    assert len(operations) >= 10
    for method, path, operation in operations:
        if path == "/metrics":  # its own token, with its own 401 and 403
            continue
        assert "401" in operation["responses"], (method, path)
        concrete = path.replace("{message_id}", "1").replace("{endpoint_id}", "1")
        answer = client.open(concrete, method=method.upper(), json={})
        assert answer.status_code == 401, (method, path, answer.get_data(as_text=True))
        assert "API key" in answer.get_json()["error"]


@pytest.mark.parametrize("value", ["0", "0.5", "1796040000", "-1"])
@pytest.mark.parametrize("name", ["created_since", "updated_since"])
def test_a_list_filter_time_of_digits_alone_is_a_400_naming_it(
    client: FlaskClient, world: World, name: str, value: str
) -> None:
    answer = client.get(
        "/v1/messages",
        query_string={name: value},
        headers={"Authorization": f"Bearer {world.api_key}"},
    )
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert answer.get_json()["field"] == name
    assert "ISO 8601" in answer.get_json()["error"]


def test_a_list_filter_time_in_iso_8601_still_filters(client: FlaskClient, world: World) -> None:
    answer = client.get(
        "/v1/messages",
        query_string={
            "created_since": "2026-11-30T12:00:00Z",
            "updated_since": "2026-11-30 12:00Z",
        },
        headers={"Authorization": f"Bearer {world.api_key}"},
    )
    assert answer.status_code == 200, answer.get_data(as_text=True)


@pytest.mark.parametrize("name", ["send_at", "expires_at"])
def test_a_send_time_of_digits_as_text_is_a_400_and_stores_nothing(
    client: FlaskClient, world: World, db: Database, name: str
) -> None:
    # An hour from now in Unix time: as a time it would be valid for either field.
    digits = str(int(utcnow().timestamp()) + 3600)
    answer = post(client, world, body(world, **{name: digits}))
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert answer.get_json()["field"] == name
    assert count_messages(db) == 0


def roll(client: FlaskClient, world: World, overlap: object):
    auth = {"Authorization": f"Bearer {world.api_key}"}
    created = client.post("/v1/callback-endpoints", json={"url": LOCAL}, headers=auth)
    assert created.status_code == 201, created.get_data(as_text=True)
    path = f"/v1/callback-endpoints/{created.get_json()['id']}/roll-secret"
    return client.post(path, json={"overlap_seconds": overlap}, headers=auth)


def test_an_overlap_written_with_a_zero_fraction_is_the_whole_number_it_is(
    client: FlaskClient, world: World
) -> None:
    before = utcnow()
    answer = roll(client, world, 3600.0)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    until = answer.get_json()["previous_secret_until"]
    assert until is not None
    ends = datetime.fromisoformat(until)
    assert before + timedelta(seconds=3600) <= ends <= utcnow() + timedelta(seconds=3600)


@pytest.mark.parametrize("overlap", [3600.5, 7 * 86400 + 1.0, -1.0])
def test_an_overlap_with_a_fraction_or_out_of_range_is_still_a_400(
    client: FlaskClient, world: World, overlap: float
) -> None:
    answer = roll(client, world, overlap)
    assert answer.status_code == 400
    assert "overlap_seconds" in answer.get_json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "sent", "status"),
    [
        ("get", "/webhooks/whatsapp", "/webhooks/whatsapp?hub.mode=%00", 400),
        ("get", "/webhooks/messenger", "/webhooks/messenger?hub.challenge=a%00", 400),
        ("post", "/webhooks/twilio/{identity_id}", "/webhooks/twilio/AAA", 404),
        ("post", "/webhooks/twilio/{identity_id}", "/webhooks/twilio/99999999999999999999", 404),
    ],
)
def test_a_provider_route_documents_what_it_answers_before_its_own_checks(
    client: FlaskClient, method: str, path: str, sent: str, status: int
) -> None:
    document = client.get("/v1/openapi.json").get_json()
    assert str(status) in document["paths"][path][method]["responses"]
    answer = client.open(sent, method=method.upper())
    assert answer.status_code == status
    assert answer.get_json()["error"]


@pytest.mark.parametrize("events", [None, [], "message.sent", ["message.sent", "nope"]])
def test_a_change_of_events_to_no_list_of_known_events_is_a_400_and_changes_nothing(
    client: FlaskClient, world: World, events: object
) -> None:
    auth = {"Authorization": f"Bearer {world.api_key}"}
    created = client.post(
        "/v1/callback-endpoints", json={"url": LOCAL, "events": ["message.sent"]}, headers=auth
    )
    path = f"/v1/callback-endpoints/{created.get_json()['id']}"
    answer = client.patch(path, json={"events": events}, headers=auth)
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert "events" in answer.get_json()["error"]
    assert client.get(path, headers=auth).get_json()["events"] == ["message.sent"]
