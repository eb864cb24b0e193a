"""Meta's account-level WhatsApp deliveries (account, template and quality events): they
name a business account and no number, and every correctly signed one is answered 2xx and
kept verbatim; an unverified one gets the unknown number's very answer."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import Identity, ProviderEvent, WebhookDelivery
from app.repo.identities import update_identity

from ..conftest import SECRET_KEY, T0, at
from ..factories import World, make_world, message
from ..meta import (
    BUSINESS_ACCOUNT_ID,
    PHONE_NUMBER_ID,
    account_body,
    encode,
    sign,
    status,
    status_body,
)
from ..whatsapp_world import SECRET, UNKNOWN, deliver, sent_message

# Real bodies other people wrote down (SDK fixtures, Meta's examples), each with its source:
# the WhatsApp and Messenger entries of a shared corpus of real payloads.
CORPUS = Path(__file__).parent.parent / "fixtures" / "realpayloads.json"


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def set_account(db: Database, world: World, account: str = BUSINESS_ACCOUNT_ID) -> None:
    from app.crypto import SecretBox

    with db.transaction() as session:
        update_identity(
            session, SecretBox(SECRET_KEY), world.identity_id, business_account_id=account, now=T0
        )


def events(db: Database) -> list[ProviderEvent]:
    with db.transaction() as session:
        return list(session.scalars(select(ProviderEvent).order_by(ProviderEvent.id)))


def delivery(db: Database, delivery_id: int) -> WebhookDelivery:
    with db.transaction() as session:
        row = session.get(WebhookDelivery, delivery_id)
        assert row is not None
        return row


def account_of(db: Database, world: World) -> str | None:
    with db.transaction() as session:
        identity = session.get(Identity, world.identity_id, populate_existing=True)
        assert identity is not None
        return identity.business_account_id


@pytest.mark.parametrize(
    "name",
    [
        "template_status_paused",
        "template_status_rejected",
        "template_status_approved",
        "template_quality_update",
        "account_restriction",
        "account_disabled",
        "phone_number_quality_update",
    ],
)
def test_a_signed_account_level_delivery_of_a_known_account_is_answered_200_and_kept_verbatim(
    client: FlaskClient, db: Database, world: World, name: str
) -> None:
    set_account(db, world)
    raw = encode(account_body(name))
    response = deliver(client, raw)
    assert response.status_code == 200, response.get_json()
    answer = response.get_json()
    assert (answer["received"], answer["kept"], answer["matched"]) == (1, 1, True)
    kept = delivery(db, answer["stored"])
    assert kept.body == raw.decode() and kept.identity_id == world.identity_id
    (event,) = events(db)
    value = account_body(name)["entry"][0]["changes"][0]
    assert (event.business_account_id, event.field, event.value) == (
        BUSINESS_ACCOUNT_ID,
        value["field"],
        value["value"],
    )
    assert event.action  # what Ratchet did is always said


def test_a_redelivered_account_event_is_kept_once(
    client: FlaskClient, db: Database, world: World
) -> None:
    set_account(db, world)
    raw = encode(account_body("template_quality_update"))
    assert deliver(client, raw).get_json()["kept"] == 1
    again = deliver(client, raw).get_json()
    assert (again["kept"], again["duplicates"]) == (0, 1)
    assert len(events(db)) == 1


def test_a_delivery_for_an_unknown_account_signed_with_a_known_app_secret_is_kept_unmatched(
    client: FlaskClient, db: Database, world: World
) -> None:
    raw = encode(account_body("account_restriction", account="555000111"))
    response = deliver(client, raw)
    assert response.status_code == 200, response.get_json()
    answer = response.get_json()
    assert answer["matched"] is False
    assert delivery(db, answer["stored"]).identity_id is None
    (event,) = events(db)
    assert event.business_account_id == "555000111"
    assert "no identity of Ratchet's" in (event.action or "")


def test_an_unverified_account_delivery_gets_the_unknown_numbers_byte_identical_answer(
    client: FlaskClient, db: Database, world: World
) -> None:
    unknown_number = deliver(
        client, encode(status_body([status("wamid.Q", "sent", at(1))], UNKNOWN))
    )
    unknown_account = deliver(
        client, encode(account_body("account_restriction", account="555000111")), secret="forged"
    )
    set_account(db, world)
    known_forged = deliver(client, encode(account_body("account_restriction")), secret="forged")
    for answer in (unknown_account, known_forged):
        assert answer.status_code == unknown_number.status_code == 401
        assert answer.get_data() == unknown_number.get_data()
        assert answer.headers["Content-Type"] == unknown_number.headers["Content-Type"]
    assert events(db) == []


def test_a_delivery_naming_both_teaches_the_number_its_business_account_once(
    client: FlaskClient, db: Database, world: World
) -> None:
    assert account_of(db, world) is None
    body = status_body([status("wamid.L", "sent", at(1))])
    body["entry"][0]["id"] = "777000777"
    assert deliver(client, encode(body)).status_code == 200
    assert account_of(db, world) == "777000777"
    # Given (or learned) once, a later delivery never overwrites it.
    body["entry"][0]["id"] = "888000888"
    body["entry"][0]["changes"][0]["value"]["statuses"][0]["id"] = "wamid.M"
    assert deliver(client, encode(body)).status_code == 200
    assert account_of(db, world) == "777000777"
    # And the account's events now reach the identity.
    response = deliver(client, encode(account_body("template_quality_update", account="777000777")))
    assert response.get_json()["matched"] is True


def _rewritten(body: dict[str, Any]) -> dict[str, Any]:
    """A corpus body under this installation's number and business account."""
    body = copy.deepcopy(body)
    for entry in body.get("entry", []):
        entry["id"] = BUSINESS_ACCOUNT_ID
        for change in entry.get("changes", []):
            metadata = change.get("value", {}).get("metadata")
            if isinstance(metadata, dict) and "phone_number_id" in metadata:
                metadata["phone_number_id"] = PHONE_NUMBER_ID
    return body


def test_every_whatsapp_body_of_the_real_corpus_is_answered_2xx_and_kept(
    client: FlaskClient, db: Database, world: World
) -> None:
    entries = [e for e in json.loads(CORPUS.read_text()) if e["provider"] == "whatsapp"]
    assert len(entries) > 60
    for item in entries:
        raw = encode(_rewritten(item["body"]))
        response = deliver(client, raw)
        assert 200 <= response.status_code < 300, (item["kind"], response.get_json())
        with db.transaction() as session:
            kept = session.scalars(
                select(WebhookDelivery.body).order_by(WebhookDelivery.id.desc()).limit(1)
            ).one()
        assert kept == raw.decode(), item["kind"]


def test_a_signature_is_checked_over_the_raw_bytes_of_an_account_delivery(
    client: FlaskClient, db: Database, world: World
) -> None:
    set_account(db, world)
    raw = encode(account_body("account_disabled"))
    tampered = raw.replace(b"DISABLE", b"REINSTATE", 1)
    response = deliver(client, tampered, signature=sign(raw, SECRET))
    assert response.status_code == 401
    assert events(db) == []


def test_a_delivery_mixing_a_numbers_status_with_an_account_event_keeps_and_acts_on_both(
    client: FlaskClient, db: Database, world: World
) -> None:
    set_account(db, world)
    message_id = sent_message(db, world, "wamid.MIX")
    body = status_body([status("wamid.MIX", "delivered", at(5))])
    body["entry"][0]["id"] = BUSINESS_ACCOUNT_ID
    body["entry"].append(account_body("account_restriction")["entry"][0])
    response = deliver(client, encode(body))
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["results"]["applied"] == 1
    assert message(db, message_id).status == "delivered"
    (event,) = events(db)
    assert event.field == "account_update" and "paused" in (event.action or "")
    with db.transaction() as session:
        identity = session.get(Identity, world.identity_id, populate_existing=True)
        # Business-initiated messaging restricted: the campaign lane is paused.
        assert identity is not None and identity.campaign_paused_by == "meta"
