"""Deliveries naming numbers we do not know: the known ones still apply, the unknown are kept
unmatched, nothing tells a caller which numbers exist, and the lookup is one query."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import event, func, select

from app.db import Database
from app.models import ConversationWindow, WebhookDelivery, WebhookStatus
from app.repo.inbox import expire_parked, pending_status_ids

from ..conftest import at
from ..factories import World, make_world, message
from ..meta import PHONE_NUMBER_ID, encode, fixture, sign, status, status_body
from ..whatsapp_world import SECRET, UNKNOWN, deliver, sent_message


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def batch(*parts: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One delivery with an entry per (phone number id, statuses)."""
    body = status_body(parts[0][1], parts[0][0])
    for routing_id, statuses in parts[1:]:
        body["entry"].append(status_body(statuses, routing_id)["entry"][0])
    return body


def statuses_under(db: Database, routing_id: str) -> list[WebhookStatus]:
    with db.transaction() as session:
        return list(
            session.scalars(
                select(WebhookStatus)
                .where(WebhookStatus.routing_id == routing_id)
                .order_by(WebhookStatus.id)
            )
        )


@contextmanager
def identity_queries(app: Flask) -> Iterator[list[str]]:
    """Every SQL statement that reads the identities table, while the block runs."""
    engine = app.extensions["ratchet.db"].engine
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM identities" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


# A signed batch naming an unknown number ------------------------------------------------


def test_a_signed_batch_naming_an_unknown_number_still_applies_the_known_numbers_statuses(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.MINE")
    body = batch(
        (PHONE_NUMBER_ID, [status("wamid.MINE", "delivered", at(5))]),
        (UNKNOWN, [status("wamid.ELSEWHERE", "read", at(6))]),
    )
    response = deliver(client, encode(body))
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["results"] == {"duplicate": 0, "applied": 1, "unmatched": 1}
    assert message(db, message_id).status == "delivered"
    (kept,) = statuses_under(db, UNKNOWN)
    assert (kept.identity_id, kept.provider_message_id, kept.status) == (
        None,
        "wamid.ELSEWHERE",
        "read",
    )
    assert kept.result == "unmatched" and kept.applied_at is not None and kept.message_id is None
    assert kept.payload["raw"]["id"] == "wamid.ELSEWHERE"  # verbatim
    (mine,) = statuses_under(db, PHONE_NUMBER_ID)
    assert mine.identity_id == world.identity_id


def test_an_unknown_numbers_statuses_are_never_replayed_by_the_sweeper_nor_expired(
    client: FlaskClient, db: Database, world: World
) -> None:
    body = batch(
        (PHONE_NUMBER_ID, [status("wamid.MINE", "sent", at(5))]),
        (UNKNOWN, [status("wamid.ELSEWHERE", "sent", at(5))]),
    )
    assert deliver(client, encode(body)).status_code == 200
    (kept,) = statuses_under(db, UNKNOWN)
    with db.transaction() as session:
        for later in (timedelta(0), timedelta(minutes=1), timedelta(days=8)):
            now = kept.received_at + later
            assert kept.id not in pending_status_ids(session, now, timedelta(minutes=10))
        # Only our own parked status (no message has wamid.MINE) ages out.
        assert expire_parked(session, kept.received_at + timedelta(days=8), timedelta(days=7)) == 1
    assert statuses_under(db, UNKNOWN)[0].result == "unmatched"


def test_a_redelivered_batch_adds_no_second_unmatched_status(
    client: FlaskClient, db: Database, world: World
) -> None:
    raw = encode(
        batch(
            (PHONE_NUMBER_ID, [status("wamid.MINE", "sent", at(5))]),
            (UNKNOWN, [status("wamid.ELSEWHERE", "sent", at(5))]),
        )
    )
    assert deliver(client, raw).status_code == 200
    again = deliver(client, raw)
    assert again.status_code == 200
    assert again.get_json()["results"] == {"duplicate": 2}
    assert len(statuses_under(db, UNKNOWN)) == 1


def test_the_same_status_under_two_unknown_numbers_is_kept_once_for_each(
    client: FlaskClient, db: Database, world: World
) -> None:
    same = status("wamid.SAME", "delivered", at(5))
    body = batch(
        (PHONE_NUMBER_ID, [status("wamid.MINE", "sent", at(5))]),
        (UNKNOWN, [same]),
        ("888888", [same]),
    )
    assert deliver(client, encode(body)).get_json()["results"]["unmatched"] == 2
    assert len(statuses_under(db, UNKNOWN)) == len(statuses_under(db, "888888")) == 1


def test_an_unknown_numbers_status_never_matches_another_tenants_message(
    client: FlaskClient, db: Database, world: World
) -> None:
    globex = make_world(db, name="globex", account_id="777", app_secret="globex-secret")
    theirs = sent_message(db, globex, "wamid.THEIRS")
    correlation = message(db, theirs).correlation_id
    # Signed with our secret, naming our number and a number we do not have, whose status
    # carries globex's provider id and correlation id.
    body = batch(
        (PHONE_NUMBER_ID, [status("wamid.MINE", "sent", at(5))]),
        (UNKNOWN, [status("wamid.THEIRS", "read", at(6), correlation_id=correlation)]),
    )
    assert deliver(client, encode(body)).status_code == 200
    assert message(db, theirs).status == "sent"
    assert statuses_under(db, UNKNOWN)[0].message_id is None


def test_an_inbound_message_to_an_unknown_number_opens_no_window(
    client: FlaskClient, db: Database, world: World
) -> None:
    body = fixture("inbound_text")
    stranger = status_body([], UNKNOWN)["entry"][0]
    stranger["changes"][0]["value"] = {
        **body["entry"][0]["changes"][0]["value"],
        "metadata": {"display_phone_number": "15550001111", "phone_number_id": UNKNOWN},
    }
    body["entry"].append(stranger)
    response = deliver(client, encode(body))
    assert response.status_code == 200, response.get_json()
    with db.transaction() as session:
        windows = session.scalars(select(ConversationWindow)).all()
    assert [w.identity_id for w in windows] == [world.identity_id]


# Naming no known number ------------------------------------------------------------------


def test_a_delivery_naming_only_unknown_numbers_is_401_and_stores_nothing(
    client: FlaskClient, db: Database, world: World
) -> None:
    raw = encode(batch((UNKNOWN, [status("wamid.Q", "sent", at(1))])))
    assert deliver(client, raw).status_code == 401
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0
        assert session.scalar(select(func.count()).select_from(WebhookStatus)) == 0


def test_unknown_numbers_and_a_bad_signature_get_byte_identical_answers(
    client: FlaskClient, db: Database, world: World
) -> None:
    unknown = deliver(client, encode(batch((UNKNOWN, [status("wamid.Q", "sent", at(1))]))))
    ours = encode(batch((PHONE_NUMBER_ID, [status("wamid.Q", "sent", at(1))])))
    forged = deliver(client, ours, signature=sign(ours, "not-the-secret"))
    assert unknown.status_code == forged.status_code == 401
    assert unknown.get_data() == forged.get_data()
    assert unknown.headers["Content-Type"] == forged.headers["Content-Type"]


def test_a_routing_id_no_identity_could_have_is_401_without_reaching_the_database(
    client: FlaskClient, app: Flask, world: World
) -> None:
    # PostgreSQL cannot take a NUL in text at all; an id over 100 characters is no account's.
    raw = encode(batch(("123\u0000", [status("wamid.Q", "sent", at(1))]), ("9" * 101, [])))
    with identity_queries(app) as queries:
        response = deliver(client, raw)
    assert response.status_code == 401
    assert queries == []


# The lookup ------------------------------------------------------------------------------


def test_a_delivery_naming_50_unknown_numbers_costs_one_identity_query(
    client: FlaskClient, app: Flask, world: World
) -> None:
    parts = [(str(500000 + n), [status(f"wamid.{n}", "sent", at(1))]) for n in range(50)]
    raw = encode(batch(*parts))
    with identity_queries(app) as queries:
        response = deliver(client, raw)
    assert response.status_code == 401
    assert len(queries) == 1


def test_a_delivery_naming_more_than_100_numbers_is_refused_before_any_lookup(
    client: FlaskClient, app: Flask, world: World
) -> None:
    parts = [(str(500000 + n), [status(f"wamid.{n}", "sent", at(1))]) for n in range(101)]
    parts[0] = (PHONE_NUMBER_ID, parts[0][1])
    raw = encode(batch(*parts))
    with identity_queries(app) as queries:
        response = deliver(client, raw)
    assert response.status_code == 400
    assert "at most 100" in response.get_json()["error"]
    assert queries == []


def test_a_delivery_naming_100_numbers_is_still_looked_up_and_verified(
    client: FlaskClient, world: World
) -> None:
    parts = [(str(500000 + n), [status(f"wamid.{n}", "sent", at(1))]) for n in range(100)]
    parts[0] = (PHONE_NUMBER_ID, parts[0][1])
    response = deliver(client, encode(batch(*parts)))
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["results"]["unmatched"] == 99
