"""Demo data for Messenger and Instagram (`make run`): one identity of each, sending
through the sandbox's Send API, customers who write in first (the Send API only answers
people who wrote), and a trickle of their traffic beside the WhatsApp demo's.

Idempotent like `app/demo.py`: a second run reuses the identities and registers their
Pages with the (new) sandbox again.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from app.clock import utcnow
from app.crypto import SecretBox
from app.db import Database
from app.repo import identities, messages

PAGES = {"messenger": "200000000000001", "instagram": "17841400000000009"}

# (provider, customer, whether they write in first, text): the first run's messages.
PAGE_MESSAGES = [
    ("messenger", "4100000000000001", True, "Thanks for your message: your order ships today."),
    ("messenger", "7770000000000006", True, "Outside the window: a dead letter (10 / 2018278)."),
    ("messenger", "7770000000000010", True, "Delivered by watermark only, then read."),
    ("instagram", "6200000000000001", True, "Hi from our Instagram account: we got your DM."),
    ("messenger", "4100000000000002", False, "Never wrote to the Page: refused by Meta."),
]


@dataclass
class PageDemo:
    provider: str
    page_id: str
    identity_id: int


def seed_pages(
    db: Database,
    box: SecretBox,
    sandbox_url: str,
    public_url: str,
    tenant_id: int,
    api_key: str | None,
) -> list[PageDemo]:
    """One identity per provider, registered with the sandbox; with a fresh `api_key`
    (the first run), `PAGE_MESSAGES` sent through the API."""
    demos = []
    for provider, page_id in PAGES.items():
        with db.transaction() as session:
            identity = identities.find_identity(session, provider, page_id)
            if identity is None:
                identity = identities.create_identity(
                    session,
                    box,
                    tenant_id=tenant_id,
                    provider=provider,
                    account_id=page_id,
                    base_url=f"{sandbox_url}/v21.0",
                    token=secrets.token_urlsafe(24),
                    app_secret=secrets.token_urlsafe(24),
                    verify_token=secrets.token_urlsafe(12),
                    now=utcnow(),
                )
            else:
                identities.update_identity(
                    session, box, identity.id, base_url=f"{sandbox_url}/v21.0", now=utcnow()
                )
            revealed = identities.reveal_secrets(box, identity)
            demos.append(PageDemo(provider, page_id, identity.id))
        httpx.post(
            f"{sandbox_url}/_sandbox/pages",
            timeout=10,
            json={
                "page_id": page_id,
                "platform": provider,
                "token": revealed.token,
                "app_secret": revealed.app_secret,
                "webhook_url": f"{public_url}/webhooks/messenger",
                "hang_seconds": 15,
                "webhook_delay_ms": 500,
            },
        ).raise_for_status()
    if api_key is not None:
        by_provider = {demo.provider: demo for demo in demos}
        for n, (provider, customer, writes, text) in enumerate(PAGE_MESSAGES):
            demo = by_provider[provider]
            if writes:
                write_in(sandbox_url, demo.page_id, customer)
            httpx.post(
                f"{public_url}/v1/messages",
                timeout=10,
                headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": f"page-{n}"},
                json={"identity_id": demo.identity_id, "to": customer, "text": text},
            ).raise_for_status()
    return demos


def write_in(sandbox_url: str, page_id: str, customer: str) -> None:
    httpx.post(
        f"{sandbox_url}/_sandbox/pages/{page_id}/inbound",
        timeout=10,
        json={"from": customer, "text": "Hello, is anyone there?"},
    ).raise_for_status()


def trickle_pages(
    db: Database,
    sandbox_url: str,
    tenant_id: int,
    demos: list[PageDemo],
    stop: threading.Event,
    every: float = 15.0,
    ring: Callable[[int, str, int], bool] | None = None,
) -> int:
    """Every `every` seconds a customer writes to one of the Pages and gets a reply (the
    reply lane: their window is open); returns how many replies were made."""
    sent = 0
    customers = itertools.count(1)
    for round_ in itertools.count():
        if stop.wait(every) or not demos:
            return sent
        demo = demos[round_ % len(demos)]
        customer = f"4200000{next(customers) % 10**9:09d}"
        text = "Thanks for writing in: an agent will reply here shortly."
        try:
            write_in(sandbox_url, demo.page_id, customer)
        except httpx.HTTPError:
            continue  # the sandbox is going away with the rest
        now = utcnow()
        with db.transaction() as session:
            message, _ = messages.create_message(
                session,
                messages.NewMessage(
                    tenant_id=tenant_id,
                    identity_id=demo.identity_id,
                    recipient=customer,
                    lane="reply",
                    fingerprint=hashlib.sha256(f"{customer}:{text}:{now}".encode()).hexdigest(),
                    body_text=text,
                ),
                now,
            )
        if ring is not None:
            ring(message.id, "reply", demo.identity_id)
        sent += 1
    return sent
