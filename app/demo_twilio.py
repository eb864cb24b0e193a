"""The Twilio half of `make run`'s demo: one Twilio identity (WhatsApp through Twilio)
sending through the sandbox's Twilio API, a few messages that show its outcomes, and its
share of the trickle. Idempotent like `app/demo.py`: the identity is reused, the sandbox
account registered again each run (the sandbox forgets everything when it stops).
"""

from __future__ import annotations

import secrets

import httpx

from app.clock import utcnow
from app.crypto import SecretBox
from app.db import Database
from app.repo import identities

ACCOUNT_SID = "AC" + "de" * 16
SENDER = "whatsapp:+15550100002"
DEMO_RECIPIENTS = [
    ("15551110011", "Through Twilio: your order #2042 has shipped."),
    ("15550000007", "Through Twilio: outside the 24-hour window (63016), a dead letter."),
    ("15550000009", "Through Twilio: sent, then undelivered (30003)."),
]
TRICKLE = [
    ("15551110012", "Through Twilio: your parcel is out for delivery."),
    ("15550000004", "Through Twilio: rate limited once (20429), then sent."),
    ("15550000010", "Through Twilio: callbacks out of order, still read."),
    ("15550000005", "Through Twilio: an invalid number (21211), a dead letter."),
]


def seed_twilio(
    db: Database,
    box: SecretBox,
    sandbox_url: str,
    public_url: str,
    tenant_id: int,
    api_key: str | None,
) -> int:
    """The demo's Twilio identity (created on the first run); its id."""
    now = utcnow()
    with db.transaction() as session:
        identity = identities.find_identity(session, "twilio", ACCOUNT_SID, SENDER)
        if identity is None:
            identity = identities.create_identity(
                session,
                box,
                tenant_id=tenant_id,
                provider="twilio",
                account_id=ACCOUNT_SID,
                base_url=sandbox_url,
                token=secrets.token_urlsafe(24),
                sender=SENDER,
                now=now,
            )
        else:
            identities.update_identity(session, box, identity.id, base_url=sandbox_url, now=now)
        token = identities.reveal_secrets(box, identity).token
        identity_id = identity.id

    httpx.post(
        f"{sandbox_url}/_sandbox/twilio/accounts",
        timeout=10,
        json={
            "account_sid": ACCOUNT_SID,
            "auth_token": token,
            "senders": [SENDER],
            "inbound_url": f"{public_url}/webhooks/twilio/{identity_id}",
            "honour_idempotency_keys": False,  # as Twilio: the webhook grace rule applies
            "hang_seconds": 15,
            "callback_delay_ms": 500,
        },
    ).raise_for_status()
    if api_key is not None:
        for n, (to, text) in enumerate(DEMO_RECIPIENTS):
            httpx.post(
                f"{public_url}/v1/messages",
                timeout=10,
                headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": f"twilio-{n}"},
                json={"identity_id": identity_id, "to": to, "text": text},
            ).raise_for_status()
    return identity_id
