"""The outbox rows: one per applied change and endpoint, in the change's own transaction,
written by the database (migration 0016) whichever path applied it; none for a refused or
duplicate status, none for another tenant's endpoint; the sequence only grows."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.callback_models import Callback
from app.crypto import SecretBox
from app.db import Database
from app.repo.callback_endpoints import EVENTS, create_endpoint
from app.repo.cancels import cancel_message
from app.repo.failures import record_failed
from app.repo.requeues import requeue_message

from ..conftest import SECRET_KEY, T0, at
from ..factories import World, make_message, make_world
from ..meta import PHONE_NUMBER_ID, encode, status, status_body
from ..whatsapp_world import SECRET, claimed, deliver, sent_message


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET, verify_token="vt-1")


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def endpoint(db: Database, tenant_id: int, events: list[str] | None = None) -> int:
    with db.transaction() as session:
        made, _ = create_endpoint(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=tenant_id,
            url="https://hooks.example.com/ratchet",
            host="hooks.example.com",
            events=events or list(EVENTS),
            now=T0,
        )
        return made.id


def rows(db: Database, message_id: int) -> list[Callback]:
    with db.transaction() as session:
        query = select(Callback).where(Callback.message_id == message_id)
        return list(session.scalars(query.order_by(Callback.id)))


def test_each_applied_webhook_status_writes_one_callback_and_refused_or_repeated_ones_none(
    db: Database, world: World, client: FlaskClient
) -> None:
    mine = endpoint(db, world.tenant_id)
    other = make_world(db, name="other", account_id="2000002")
    endpoint(db, other.tenant_id)
    message_id = sent_message(db, world, "wamid.C1")
    for word, seconds in (("delivered", 5), ("delivered", 5), ("read", 6), ("delivered", 7)):
        raw = encode(status_body([status("wamid.C1", word, at(seconds))]))
        assert deliver(client, raw).status_code == 200
    found = rows(db, message_id)
    assert [(c.event, c.sequence, c.endpoint_id) for c in found] == [
        ("message.sent", 1, mine),
        ("message.delivered", 2, mine),
        ("message.read", 3, mine),
    ]
    data = found[2].payload["data"]
    assert data["message_id"] == message_id and data["status"] == "read"
    assert data["provider_message_id"] == "wamid.C1" and data["sequence"] == 3
    assert found[2].payload["type"] == "message.read"
    assert found[2].payload["timestamp"].startswith(at(6).strftime("%Y-%m-%dT%H:%M:%S"))


def test_a_failure_carries_its_class_code_and_verbatim_words_and_requeue_and_cancel_follow(
    db: Database, world: World
) -> None:
    endpoint(db, world.tenant_id)
    claim = claimed(db, world, key="order-7")
    error = {
        "provider": "whatsapp",
        "http_status": 400,
        "code": 131026,
        "title": "Undeliverable",
        "message": "Message Undeliverable.",
        "raw": "{}",
    }
    with db.transaction() as session:
        record_failed(
            session,
            claim,
            at(2),
            failure_class="permanent",
            error=error,
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
    with db.transaction() as session:
        requeue_message(session, claim.message_id, at(3), actor="test")
    with db.transaction() as session:
        outcome = cancel_message(session, claim.message_id, at(4), actor="test", reason="no")
        assert outcome.canceled
    found = rows(db, claim.message_id)
    assert [(c.event, c.sequence) for c in found] == [
        ("message.failed", 1),
        ("message.requeued", 2),
        ("message.canceled", 3),
    ]
    failed = found[0].payload["data"]
    assert failed["idempotency_key"] == "order-7"
    assert failed["error"]["class"] == "permanent"
    assert failed["error"]["code"] == 131026
    assert failed["error"]["message"] == "Message Undeliverable."
    assert found[2].payload["data"]["error"]["class"] == "canceled"


def test_an_endpoint_gets_only_the_events_it_chose_and_a_tenant_without_one_writes_nothing(
    db: Database, world: World, client: FlaskClient
) -> None:
    quiet = make_world(db, name="quiet", account_id="3000003")
    unheard = make_message(db, quiet)
    chosen = endpoint(db, world.tenant_id, events=["message.read"])
    message_id = sent_message(db, world, "wamid.C2")
    raw = encode(status_body([status("wamid.C2", "read", at(6))]))
    assert deliver(client, raw).status_code == 200
    assert [(c.event, c.endpoint_id) for c in rows(db, message_id)] == [("message.read", chosen)]
    with db.transaction() as session:
        cancel_message(session, unheard, at(1), actor="test", reason="no")
    assert rows(db, unheard) == []
