"""Demo data for `make run`: a tenant, a staff login, a WhatsApp identity that sends through
the sandbox provider, and a few messages that show each kind of outcome.

Idempotent: a second run reuses what the first created (the database persists; the
sandbox forgets everything when it stops, so its number is registered again each time).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import httpx

from app.clock import utcnow
from app.crypto import SecretBox
from app.db import Database
from app.repo import identities, staff, tenants

TENANT = "demo"
STAFF_EMAIL = "support@demo.test"
PHONE_NUMBER_ID = "100000000000001"
DEMO_RECIPIENTS = [
    ("15551110001", "Your order #1042 has shipped."),
    ("15551110002", "Your table for two is confirmed for 19:30."),
    ("15550000003", "A provider hiccup: two 503s, then accepted."),
    ("15550000004", "Rate limited once, then accepted after Retry-After."),
    ("15550000005", "Undeliverable: a dead letter with Meta's verbatim error."),
    ("15550000008", "A paused template: needs a human."),
    ("15550000011", "Webhooks out of order: delivered before sent."),
]


@dataclass
class DemoLogin:
    email: str
    password: str | None  # None: created on an earlier run
    api_key: str | None


def wait_for(url: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {seconds:.0f} s")
        time.sleep(0.3)


def seed(db: Database, box: SecretBox, sandbox_url: str, public_url: str) -> DemoLogin:
    now = utcnow()
    with db.transaction() as session:
        tenant = tenants.get_tenant_by_name(session, TENANT)
        api_key = None
        if tenant is None:
            tenant, api_key = tenants.create_tenant(session, TENANT, now)
        identity = identities.find_identity(session, "whatsapp", PHONE_NUMBER_ID)
        if identity is None:
            identity = identities.create_identity(
                session,
                box,
                tenant_id=tenant.id,
                provider="whatsapp",
                account_id=PHONE_NUMBER_ID,
                base_url=f"{sandbox_url}/v21.0",
                token=secrets.token_urlsafe(24),
                app_secret=secrets.token_urlsafe(24),
                verify_token=secrets.token_urlsafe(12),
                now=now,
            )
        else:
            # The sandbox picks a new port each run.
            identities.update_identity(
                session, box, identity.id, base_url=f"{sandbox_url}/v21.0", now=utcnow()
            )
        password = None
        if staff.get_staff_by_email(session, STAFF_EMAIL) is None:
            password = secrets.token_urlsafe(10)
            staff.create_staff(session, STAFF_EMAIL, "admin", password, now)
        revealed = identities.reveal_secrets(box, identity)
        identity_id = identity.id

    httpx.post(
        f"{sandbox_url}/_sandbox/numbers",
        timeout=10,
        json={
            "phone_number_id": PHONE_NUMBER_ID,
            "token": revealed.token,
            "app_secret": revealed.app_secret,
            "webhook_url": f"{public_url}/webhooks/whatsapp",
            "honour_idempotency_keys": True,
            "hang_seconds": 15,
            "webhook_delay_ms": 500,
        },
    ).raise_for_status()

    if api_key is not None:
        for n, (to, text) in enumerate(DEMO_RECIPIENTS):
            httpx.post(
                f"{public_url}/v1/messages",
                timeout=10,
                headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": f"demo-{n}"},
                json={"identity_id": identity_id, "to": to, "text": text},
            ).raise_for_status()
    return DemoLogin(STAFF_EMAIL, password, api_key)
