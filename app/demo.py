"""Demo data for `make run`: a tenant, a staff login, a WhatsApp identity that sends through
the sandbox provider, a few messages that show each kind of outcome, and then a steady
trickle of traffic (`trickle`), so the dashboard shows what a support person would see:
messages moving, a dead letter now and then, a retry waiting, replies to customers.

Idempotent: a second run reuses what the first created (the database persists; the
sandbox forgets everything when it stops, so its number is registered again each time).
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from app.clock import utcnow
from app.crypto import SecretBox
from app.db import Database
from app.repo import identities, messages, staff, tenants

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


# The trickle's round: ordinary sends, the sandbox's fault recipients, and replies to a
# customer who just wrote in (None: a reply to the next customer).
TRICKLE: list[tuple[str | None, str]] = [
    ("15551110003", "Your parcel is out for delivery."),
    (None, "Thanks for writing in: an agent will call you back today."),
    ("15550000003", "A flaky provider: retried after its 503s."),
    ("15551110004", "Your appointment is tomorrow at 10:00."),
    ("15550000010", "Accepted, then failed by the provider (131049)."),
    (None, "Your refund was approved."),
    ("15550000004", "Rate limited once, then sent."),
    ("15550000006", "Outside the 24-hour window: a dead letter."),
    ("15550000012", "Read without a delivered receipt."),
    ("15550000007", "A template that does not exist: needs a human."),
]


@dataclass
class DemoLogin:
    email: str
    password: str | None  # None: created on an earlier run
    api_key: str | None
    identity_id: int = 0
    tenant_id: int = 0
    twilio_identity_id: int = 0


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
    from app.demo_twilio import seed_twilio

    twilio_id = seed_twilio(db, box, sandbox_url, public_url, tenant.id, api_key)
    return DemoLogin(STAFF_EMAIL, password, api_key, identity_id, tenant.id, twilio_id)


def trickle(
    db: Database,
    sandbox_url: str,
    login: DemoLogin,
    stop: threading.Event,
    every: float = 10.0,
    ring: Callable[[int, str, int], bool] | None = None,
) -> int:
    """Send one message of `TRICKLE` every `every` seconds until `stop`; returns how many.

    Replies go to a customer who has just written in (the sandbox posts the signed inbound
    webhook, which opens the 24-hour window), so they take the reply lane by default.
    """
    sent = 0
    customers = itertools.count(1)
    while not stop.wait(every):
        to, text = TRICKLE[sent % len(TRICKLE)]
        lane = "campaign"
        identity_id = login.identity_id
        if login.twilio_identity_id and sent % 3 == 2:
            # Every third message goes out through the Twilio identity.
            from app.demo_twilio import TRICKLE as TWILIO_TRICKLE

            to, text = TWILIO_TRICKLE[(sent // 3) % len(TWILIO_TRICKLE)]
            identity_id = login.twilio_identity_id
        if to is None:
            to = f"1555222{next(customers) % 10000:04d}"
            lane = "reply"
            try:
                httpx.post(
                    f"{sandbox_url}/_sandbox/numbers/{PHONE_NUMBER_ID}/inbound",
                    timeout=10,
                    json={"from": to, "text": "Hello, is anyone there?"},
                ).raise_for_status()
            except httpx.HTTPError:
                continue  # the sandbox is going away with the rest
        now = utcnow()
        with db.transaction() as session:
            message, _ = messages.create_message(
                session,
                messages.NewMessage(
                    tenant_id=login.tenant_id,
                    identity_id=identity_id,
                    recipient=to,
                    lane=lane,
                    fingerprint=hashlib.sha256(f"{to}:{text}:{now}".encode()).hexdigest(),
                    body_text=text,
                ),
                now,
            )
        if ring is not None:
            ring(message.id, lane, identity_id)
        sent += 1
    return sent
