"""A Messenger Page (or Instagram account) in the sandbox with the Ratchet identity sending
through it, and its customer writing in: for the tests that run the worker against them.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from app.models import ConversationWindow
from app.repo.identities import create_identity
from app.repo.tenants import create_tenant

from ..views.messenger_bodies import ms
from .conftest import HANG_SECONDS, Env

_pages = itertools.count(1)


def page(env: Env, platform: str = "messenger", **settings: Any) -> dict[str, Any]:
    """A sandbox Page (or Instagram account) and the Ratchet identity sending through it."""
    page_id = f"1067{next(_pages):012d}"
    env.sandbox(
        "POST",
        "/pages",
        json={
            "page_id": page_id,
            "platform": platform,
            "token": "page-token",
            "app_secret": "page-app-secret",
            "webhook_url": f"{env.base_url}/webhooks/messenger",
            "hang_seconds": HANG_SECONDS,
            **settings,
        },
    )
    with env.db.transaction() as session:
        tenant, key = create_tenant(session, f"tenant-{page_id}", env.now)
        identity = create_identity(
            session,
            env.box,
            tenant_id=tenant.id,
            provider=platform,
            account_id=page_id,
            base_url=f"{env.sandbox_url}/v21.0",
            token="page-token",
            app_secret="page-app-secret",
            now=env.now,
        )
    # `phone_number_id`: the key Env's helpers (settle, requests) filter the logs by.
    return {"phone_number_id": page_id, "identity_id": identity.id, "api_key": key}


def sync_clock(env: Env, target: dict[str, Any]) -> None:
    offset = ms(env.now) - ms(datetime.now(UTC))
    env.sandbox("PATCH", f"/pages/{target['phone_number_id']}", json={"clock_offset_ms": offset})


def customer_writes(env: Env, target: dict[str, Any], customer: str) -> None:
    """The customer writes to the Page; wait until Ratchet has opened their window."""
    sync_clock(env, target)
    path = f"/pages/{target['phone_number_id']}/inbound"
    env.sandbox("POST", path, json={"from": customer, "text": "hello?"})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with env.db.transaction() as session:
            window = session.scalars(
                select(ConversationWindow).where(
                    ConversationWindow.identity_id == target["identity_id"],
                    ConversationWindow.recipient == customer,
                )
            ).one_or_none()
        if window is not None:
            return
        time.sleep(0.05)
    raise AssertionError("the inbound message never opened a window")
