"""A Twilio WhatsApp sender of ours and its callbacks: the documented bodies in
`tests/fixtures/twilio/`, the URL each is signed for, and a message Twilio accepted.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from flask.testing import FlaskClient
from twilio.request_validator import RequestValidator

from app.crypto import SecretBox
from app.db import Database
from app.repo.acceptance import record_accepted
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.identities import create_identity
from app.repo.tenants import create_tenant

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_message

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "twilio"
PUBLIC = "http://127.0.0.1:8000"  # the test app's PUBLIC_BASE_URL (the default)
SID = "AC" + "X" * 32  # the fixtures' account
TOKEN = "twilio-auth-token-acme"
SENDER = "whatsapp:+14155238886"
MESSAGE_SID = "SM" + "X" * 32
LEASE = timedelta(seconds=25)


def fixture(name: str) -> dict[str, str]:
    return json.loads((FIXTURES / name).read_text())


def make_twilio_world(
    db: Database, *, name: str = "acme", sid: str = SID, token: str = TOKEN, sender: str = SENDER
) -> World:
    with db.transaction() as session:
        tenant, key = create_tenant(session, name, T0)
        identity = create_identity(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=tenant.id,
            provider="twilio",
            account_id=sid,
            base_url="http://127.0.0.1:9",
            token=token,
            sender=sender,
            now=T0,
        )
        return World(tenant.id, key, identity.id)


def path_of(identity_id: int, correlation_id: str | None = None) -> str:
    path = f"/webhooks/twilio/{identity_id}"
    return path + (f"?c={quote(correlation_id, safe='')}" if correlation_id else "")


def sent_message(db: Database, world: World, sid: str = MESSAGE_SID) -> int:
    message_id = make_message(db, world, recipient="16505551234")
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", T0)
        record_accepted(
            session, claim, sid, T0 + timedelta(seconds=1), unknown_attempts=0, had_unknown=False
        )
    return message_id


def post(
    client: FlaskClient,
    identity_id: int,
    fields: dict[str, str],
    *,
    token: str = TOKEN,
    correlation_id: str | None = None,
    signature: str | None = None,
    signed_fields: dict[str, str] | None = None,
    signed_path: str | None = None,
) -> Any:
    path = path_of(identity_id, correlation_id)
    # Signed by the official library, at the public URL Twilio was given.
    url = PUBLIC + (signed_path or path)
    sig = signature or RequestValidator(token).compute_signature(url, signed_fields or fields)
    return client.post(
        path,
        data=urlencode(fields),
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": sig,
        },
    )
