"""WhatsApp's webhook endpoint at its door: a delivery whose signature does not verify
(a changed byte, a wrong, missing, SHA-1 or garbled header, another identity's secret, a
replaced secret, a mix of identities, an unknown number) is 401 and applies nothing; an
unusual but signed formatting verifies against its raw bytes; malformed JSON is 400 and
an oversized body 413; the subscription handshake answers only a known verify token."""

from __future__ import annotations

import json

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database

from ..conftest import at
from ..factories import World, make_world, message
from ..meta import encode, sign, status, status_body
from ..whatsapp_world import SECRET, deliver, sent_message, set_app_secret
from .whatsapp_webhook_fixtures import assert_nothing_applied, client, world

__all__ = ["client", "world"]  # the fixtures, imported for these tests


def _body_for(db: Database, world: World) -> tuple[int, bytes]:
    message_id = sent_message(db, world, "wamid.SIG")
    return message_id, encode(status_body([status("wamid.SIG", "delivered", at(5))]))


def test_a_one_byte_change_is_401_and_nothing_is_applied(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id, raw = _body_for(db, world)
    signature = sign(raw, SECRET)
    tampered = raw.replace(b"delivered", b"delivereD")
    assert deliver(client, tampered, signature=signature).status_code == 401
    assert_nothing_applied(db, message_id)


@pytest.mark.parametrize("header", ["wrong-secret", "missing", "sha1", "garbage"])
def test_a_bad_or_missing_signature_is_401_and_nothing_is_applied(
    client: FlaskClient, db: Database, world: World, header: str
) -> None:
    message_id, raw = _body_for(db, world)
    headers = {"Content-Type": "application/json"}
    if header == "wrong-secret":
        headers["X-Hub-Signature-256"] = sign(raw, "not-the-secret")
    elif header == "sha1":
        headers["X-Hub-Signature-256"] = "sha1=" + sign(raw, SECRET)[7:]
    elif header == "garbage":
        headers["X-Hub-Signature-256"] = "sha256=zz\u00e9"
    response = client.post("/webhooks/whatsapp", data=raw, headers=headers)
    assert response.status_code == 401
    assert_nothing_applied(db, message_id)


def test_another_identitys_secret_does_not_verify(
    client: FlaskClient, db: Database, world: World
) -> None:
    make_world(db, name="globex", account_id="777", app_secret="globex-secret")
    message_id, raw = _body_for(db, world)
    assert deliver(client, raw, secret="globex-secret").status_code == 401
    assert_nothing_applied(db, message_id)


def test_a_new_app_secret_verifies_at_once_and_the_old_one_no_longer_does(
    app: Flask, client: FlaskClient, db: Database, world: World
) -> None:
    # The webhook remembers decrypted secrets by their ciphertext: a secret set again is a
    # new ciphertext, so the next delivery is checked against the new one.
    message_id, raw = _body_for(db, world)
    assert deliver(client, raw, secret="the-old-one-is-wrong").status_code == 401  # warm
    with db.transaction() as session:
        set_app_secret(app, session, world.identity_id, "meta-app-secret-2")
    assert deliver(client, raw, secret=SECRET).status_code == 401
    assert_nothing_applied(db, message_id)
    assert deliver(client, raw, secret="meta-app-secret-2").status_code == 200
    assert message(db, message_id).status == "delivered"


def test_a_delivery_naming_identities_with_different_secrets_is_401(
    client: FlaskClient, db: Database, world: World
) -> None:
    make_world(db, name="globex", account_id="777", app_secret="globex-secret")
    message_id, _ = _body_for(db, world)
    body = status_body([status("wamid.SIG", "delivered", at(5))])
    body["entry"].append(status_body([status("wamid.X", "read", at(5))], "777")["entry"][0])
    assert deliver(client, encode(body)).status_code == 401
    assert_nothing_applied(db, message_id)


def test_a_delivery_for_an_unknown_number_is_401(client: FlaskClient, db: Database) -> None:
    raw = encode(status_body([status("wamid.Q", "sent", at(1))], "999999"))
    assert deliver(client, raw).status_code == 401


def test_an_unusually_formatted_delivery_verifies_against_its_raw_bytes(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.FMT")
    body = status_body([status("wamid.FMT", "read", at(9))])
    body["entry"][0]["changes"][0]["value"]["metadata"]["display_phone_number"] = (
        "Caf\u00e9 \U0001f600"
    )
    # Indented, keys reversed, non-ASCII escaped: re-serialising would change the bytes.
    raw = json.dumps(_reversed(body), indent=3, ensure_ascii=True).encode()
    assert deliver(client, raw).status_code == 200
    assert message(db, message_id).status == "read"


def _reversed(value):
    if isinstance(value, dict):
        return {k: _reversed(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed(v) for v in value]
    return value


def test_malformed_json_is_400_and_an_oversized_body_413(client: FlaskClient, world: World) -> None:
    assert deliver(client, b'{"object": ').status_code == 400
    huge = b'{"object":"whatsapp_business_account","pad":"' + b"x" * (1024 * 1024) + b'"}'
    assert deliver(client, huge).status_code == 413


def test_the_handshake_answers_the_challenge_only_for_a_known_verify_token(
    client: FlaskClient, world: World
) -> None:
    ok = client.get(
        "/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token=vt-1&hub.challenge=1158201444"
    )
    assert ok.status_code == 200 and ok.get_data(as_text=True) == "1158201444"
    wrong = client.get(
        "/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=1"
    )
    mode = client.get(
        "/webhooks/whatsapp?hub.mode=unsubscribe&hub.verify_token=vt-1&hub.challenge=1"
    )
    assert wrong.status_code == 403 and mode.status_code == 403


# Ordering and duplicates ----------------------------------------------------------------
