"""`send_at`, `valid_for` and `expires_at` through `POST /v1/messages` (issue 34): bad
values are a JSON 400 naming the field and store nothing; good ones are stored and
answered; the idempotency key's fingerprint covers them; the OpenAPI document has them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.clock import utcnow
from app.db import Database

from .api_requests import body, client, count_messages, iso, post, world

__all__ = ["client", "world"]  # the fixtures, imported for these tests


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"send_at": "next tuesday"}, "send_at"),
        ({"send_at": "2030-01-01T09:00:00"}, "send_at"),  # no offset
        ({"send_at": 1893488400}, "send_at"),
        ({"send_at": "+40 days"}, "send_at"),
        ({"valid_for": 0}, "valid_for"),
        ({"valid_for": -5}, "valid_for"),
        ({"valid_for": 36 * 86400}, "valid_for"),
        ({"valid_for": "60"}, "valid_for"),
        ({"valid_for": 60, "expires_at": "+1 hour"}, "valid_for"),
        ({"send_at": "+2 hours", "expires_at": "+1 hour"}, "expires_at"),
        ({"expires_at": "-1 hour"}, "expires_at"),
        ({"send_at": ""}, "send_at"),
        ({"send_at": "2030-02-30T09:00:00Z"}, "send_at"),  # no such day
        ({"valid_for": 60.5}, "valid_for"),
        ({"expires_at": "+36 days"}, "expires_at"),
        ({"send_at": "+2 hours", "expires_at": "+2 hours"}, "expires_at"),  # ends as it starts
        ({"send_at": "+2 hours", "expires_at": "+37 days"}, "expires_at"),
    ],
)
def test_bad_times_are_a_json_400_naming_the_field_and_store_nothing(
    client: FlaskClient,
    world,
    db: Database,
    extra: dict[str, object],
    field: str,
) -> None:
    now = utcnow()
    offsets = {
        "+40 days": now + timedelta(days=40),
        "+2 hours": now + timedelta(hours=2),
        "+1 hour": now + timedelta(hours=1),
        "-1 hour": now - timedelta(hours=1),
        "+36 days": now + timedelta(days=36),
        "+37 days": now + timedelta(days=37),
    }
    values = {k: iso(offsets[v]) if v in offsets else v for k, v in extra.items()}
    response = post(client, world, body(world, **values))
    assert response.status_code == 400, response.get_json()
    assert response.get_json()["field"] == field
    # Refused for its value, not as a field the API does not know.
    assert "is not a field" not in response.get_json()["error"]
    assert count_messages(db) == 0


def test_a_scheduled_expiring_message_is_stored_and_answered(
    client: FlaskClient,
    world,
) -> None:
    send_at = (utcnow() + timedelta(days=2)).replace(microsecond=0)
    response = post(client, world, body(world, send_at=iso(send_at), valid_for=600))
    assert response.status_code == 201, response.get_json()
    data = response.get_json()
    assert data["status"] == "queued"
    assert data["send_at"] == iso(send_at)
    assert data["expires_at"] == iso(send_at + timedelta(minutes=10))
    # A past send_at means now: nothing scheduled.
    past = post(client, world, body(world, send_at=iso(utcnow() - timedelta(hours=1))))
    assert past.status_code == 201 and past.get_json()["send_at"] is None


def test_the_same_key_with_another_send_at_is_another_request(
    client: FlaskClient,
    world,
) -> None:
    send_at = utcnow() + timedelta(days=1)
    first = post(client, world, body(world, idempotency_key="k-1", send_at=iso(send_at)))
    assert first.status_code == 201
    again = post(client, world, body(world, idempotency_key="k-1", send_at=iso(send_at)))
    assert again.status_code == 200
    other = iso(send_at + timedelta(hours=1))
    moved = post(client, world, body(world, idempotency_key="k-1", send_at=other))
    assert moved.status_code == 422
    longer = post(
        client, world, body(world, idempotency_key="k-1", send_at=iso(send_at), valid_for=60)
    )
    assert longer.status_code == 422


def test_the_openapi_document_describes_them(app: Flask) -> None:
    document = app.test_client().get("/v1/openapi.json").get_json()
    send = document["components"]["schemas"]["SendRequest"]["properties"]
    assert {"send_at", "valid_for", "expires_at"} <= set(send)
    assert send["valid_for"]["anyOf"][0]["exclusiveMinimum"] == 0
    message = document["components"]["schemas"]["Message"]["properties"]
    assert {"send_at", "expires_at"} <= set(message)
