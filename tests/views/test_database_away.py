"""The API and the webhooks while the database does not answer (a restart, a failover): a
503 with Retry-After and a JSON body that says so, never a 500, and the same request sent
again once it is back is taken once."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from flask import Flask
from sqlalchemy import func, select

from app.db import Database
from app.models import Message

from ..conftest import at, make_app
from ..factories import make_world
from ..meta import encode, sign, status, status_body


def closed_port() -> int:
    """A port on this machine nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def away(redis_url: str) -> Iterator[Flask]:
    """The app with its database at an address that refuses every connection."""
    app = make_app(f"postgresql+psycopg://127.0.0.1:{closed_port()}/ratchet", redis_url)
    app.config["PROPAGATE_EXCEPTIONS"] = False  # a 500 would be an answer, not a crash
    yield app
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()


def test_a_send_while_the_database_is_away_is_a_503_and_its_retry_is_taken_once(
    away: Flask, app: Flask, committed_db: Database
) -> None:
    world = make_world(committed_db)
    body = {"identity_id": world.identity_id, "to": "+15551234567", "text": "hi"}
    headers = {"Authorization": f"Bearer {world.api_key}", "Idempotency-Key": "away-1"}

    refused = away.test_client().post("/v1/messages", json=body, headers=headers)

    assert refused.status_code == 503, refused.get_data(as_text=True)
    assert refused.headers["Retry-After"] == "2"
    assert refused.get_json() == {"error": "the database does not answer: try again shortly"}
    client = app.test_client()  # the database back
    first = client.post("/v1/messages", json=body, headers=headers)
    again = client.post("/v1/messages", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    with committed_db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(Message)) == 1


def test_a_webhook_while_the_database_is_away_is_a_503_the_provider_sends_again(
    away: Flask,
) -> None:
    raw = encode(status_body([status("wamid.AWAY1", "delivered", at(5))]))
    response = away.test_client().post(
        "/webhooks/whatsapp",
        data=raw,
        headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, "s")},
    )
    assert response.status_code == 503, response.get_data(as_text=True)
    assert response.headers["Retry-After"] == "2"
