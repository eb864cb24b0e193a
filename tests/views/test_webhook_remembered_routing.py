"""The webhook's fast path on its own (`record_with_remembered_routing` in
`app/views/webhook_record.py`): which deliveries take it, and what it does with them.

One status of one number, verified with the identity this process remembers for it, is
recorded in one statement and no lookup; anything else is left to the looked-up path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func, select

from app.db import Database
from app.models import WebhookDelivery
from app.providers import get_provider
from app.repo.routing import routed_identities
from app.views.webhook_record import (
    NOT_VERIFIED,
    Arrival,
    Stored,
    record_with_remembered_routing,
    remembered_routing,
)

from ..conftest import at
from ..factories import World, make_world
from ..meta import PHONE_NUMBER_ID, encode, sign, status, status_body
from ..sql_verbs import statements
from ..whatsapp_world import SECRET, sent_message, set_app_secret


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)


@pytest.fixture(autouse=True)
def in_a_request(app: Flask) -> Iterator[None]:
    with app.test_request_context("/webhooks/whatsapp", method="POST"):
        yield


def arrival(body: dict[str, Any], secret: str = SECRET) -> Arrival:
    """A delivery of `body` signed with `secret`, as `receive` parses it."""
    provider = get_provider("whatsapp")
    raw = encode(body)
    payload = json.loads(raw)
    return Arrival(
        provider,
        raw,
        {"X-Hub-Signature-256": sign(raw, secret)},
        provider.routing_ids(payload),
        provider.parse_webhook(payload),
        payload,
    )


def remember(db: Database) -> None:
    """What the looked-up path keeps after a lookup of the number."""
    with db.autocommit() as connection:
        by_route = routed_identities(connection, "whatsapp", [PHONE_NUMBER_ID])
    remembered_routing().keep("whatsapp", by_route)


def deliveries(db: Database) -> int:
    with db.transaction() as session:
        return session.scalar(select(func.count(WebhookDelivery.id))) or 0


def one_status(wamid: str) -> dict[str, Any]:
    return status_body([status(wamid, "delivered", at(5))])


def test_nothing_remembered_takes_no_fast_path_and_sends_nothing(
    db: Database, world: World
) -> None:
    sent_message(db, world, "wamid.FAST")
    with statements(db) as verbs:
        assert record_with_remembered_routing(db, arrival(one_status("wamid.FAST"))) == (
            None,
            None,
        )
    assert verbs == []


def test_a_remembered_number_records_its_one_status_in_one_statement_with_no_lookup(
    db: Database, world: World
) -> None:
    sent_message(db, world, "wamid.FAST")
    remember(db)
    with statements(db) as verbs:
        stored, identity = record_with_remembered_routing(db, arrival(one_status("wamid.FAST")))
    assert verbs == ["WITH"]  # the raw delivery and its status row, no lookup
    assert isinstance(stored, Stored)
    assert len(stored.recorded.to_apply) == 1
    assert identity is not None and identity.id == world.identity_id


def test_a_signature_the_remembered_secret_does_not_verify_is_not_verified(
    db: Database, world: World
) -> None:
    sent_message(db, world, "wamid.FAST")
    remember(db)
    with statements(db) as verbs:
        stored, identity = record_with_remembered_routing(
            db, arrival(one_status("wamid.FAST"), secret="not-the-secret")
        )
    assert stored is NOT_VERIFIED
    assert identity is not None and identity.id == world.identity_id
    assert verbs == []
    assert deliveries(db) == 0


def test_a_delivery_of_two_statuses_takes_no_fast_path(db: Database, world: World) -> None:
    sent_message(db, world, "wamid.ONE")
    sent_message(db, world, "wamid.TWO")
    remember(db)
    body = status_body(
        [status("wamid.ONE", "delivered", at(5)), status("wamid.TWO", "read", at(6))]
    )
    with statements(db) as verbs:
        assert record_with_remembered_routing(db, arrival(body)) == (None, None)
    assert verbs == []


def test_a_secret_set_again_since_it_was_remembered_records_nothing_and_is_forgotten(
    app: Flask, db: Database, world: World
) -> None:
    sent_message(db, world, "wamid.FAST")
    remember(db)
    with db.transaction() as session:
        set_app_secret(app, session, world.identity_id, "meta-app-secret-2")
    # Signed with the secret it remembers, which the identity no longer has.
    stored, identity = record_with_remembered_routing(db, arrival(one_status("wamid.FAST")))
    assert stored is None and identity is not None
    assert remembered_routing().get("whatsapp", PHONE_NUMBER_ID) is None
    assert deliveries(db) == 0
