"""A signed webhook's raw delivery keeps only the headers a person or a replay needs (the
signature, the body's type, the user agent, the provider's delivery ids), never a Cookie,
an Authorization or what a proxy added."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from flask import Flask
from sqlalchemy import select
from twilio.request_validator import RequestValidator

from app.db import Database
from app.models import WebhookDelivery

from ..conftest import T0
from ..factories import make_world
from ..meta import PHONE_NUMBER_ID, encode, sign, status, status_body
from .twilio_world import PUBLIC, TOKEN, fixture, make_twilio_world, path_of, sent_message

STRAY = {
    "Cookie": "session=stolen-session-cookie",
    "Authorization": "Bearer someone-elses-key",
    "X-Forwarded-For": "203.0.113.9",
    "X-Api-Key": "a-secret-header",
}


def stored_headers(db: Database) -> dict[str, str]:
    with db.transaction() as session:
        (delivery,) = session.scalars(select(WebhookDelivery))
        return dict(delivery.headers)


def test_a_signed_whatsapp_delivery_keeps_its_signature_type_and_agent_and_nothing_else(
    app: Flask, db: Database
) -> None:
    make_world(db, account_id=PHONE_NUMBER_ID, app_secret="meta-app-secret")
    raw = encode(status_body([status("wamid.kept", "delivered", T0 + timedelta(seconds=5))]))
    signature = sign(raw, "meta-app-secret")
    response = app.test_client().post(
        "/webhooks/whatsapp",
        data=raw,
        headers={
            "Content-Type": "application/json",
            "X-Hub-Signature-256": signature,
            "User-Agent": "facebookexternalua",
            "X-FB-Request-Id": "fb-delivery-1",
            **STRAY,
        },
    )
    assert response.status_code == 200, response.get_json()
    kept = {name.lower(): value for name, value in stored_headers(db).items()}
    assert kept == {
        "content-type": "application/json",
        "x-hub-signature-256": signature,
        "user-agent": "facebookexternalua",
        "x-fb-request-id": "fb-delivery-1",
    }


def test_a_signed_twilio_callback_keeps_its_signature_and_idempotency_token_only(
    app: Flask, db: Database
) -> None:
    world = make_twilio_world(db)
    sent_message(db, world)
    fields = fixture("status_delivered.json")
    path = path_of(world.identity_id)
    signature = RequestValidator(TOKEN).compute_signature(PUBLIC + path, fields)
    response = app.test_client().post(
        path,
        data=urlencode(fields),
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": signature,
            "I-Twilio-Idempotency-Token": "twilio-delivery-1",
            "User-Agent": "TwilioProxy/1.1",
            **STRAY,
        },
    )
    assert response.status_code == 200, response.get_json()
    kept = {name.lower() for name in stored_headers(db)}
    assert kept == {
        "content-type",
        "x-twilio-signature",
        "i-twilio-idempotency-token",
        "user-agent",
    }
