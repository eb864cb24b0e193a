"""`Ratchet`: the app served over real HTTP on a free port, with real commits, for the
Messenger and Instagram webhook tests to post signed deliveries to and read the rows back.
The `ratchet` fixture serves one and `page` makes its Messenger Page (`tests/views/conftest.py`).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import func, select

from app.db import Database
from app.models import Message, MessageEvent
from app.repo.acceptance import record_accepted
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.watermarks import stamp_call_start

from ..factories import World, make_message
from .messenger_bodies import SECRET, sign

LEASE = timedelta(seconds=25)


class Ratchet:
    """The app served over HTTP on a free port, with real commits."""

    def __init__(self, url: str, db: Database) -> None:
        self.url = url
        self.db = db
        self.http = httpx.Client(timeout=10)

    def post(
        self,
        body: dict[str, Any] | bytes,
        secret: str = SECRET,
        *,
        signature: str | None = None,
        signed: bool = True,
    ) -> httpx.Response:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if signed:
            headers["X-Hub-Signature-256"] = signature or sign(raw, secret)
        return self.http.post(f"{self.url}/webhooks/messenger", content=raw, headers=headers)

    def sent(self, world: World, recipient: str, started: datetime, mid: str) -> int:
        """A message to `recipient` whose send request started at `started`, accepted as `mid`:
        claimed 3.5 s before its call started (a batch queued behind busy call threads)."""
        message_id = make_message(self.db, world, recipient=recipient)
        claimed_at = started - timedelta(seconds=3.5)
        with self.db.transaction() as session:
            claim = claim_message(session, message_id, claimed_at, LEASE)
            assert claim is not None
            start_attempt(session, claim, f"key-{message_id}", claimed_at)
        with self.db.transaction() as session:
            stamp_call_start(session, claim, "messenger", started)
            record_accepted(
                session,
                claim,
                mid,
                started + timedelta(milliseconds=200),
                unknown_attempts=0,
                had_unknown=False,
            )
        return message_id

    def status(self, message_id: int) -> str:
        with self.db.transaction() as session:
            row = session.get(Message, message_id, populate_existing=True)
            assert row is not None
            return row.status

    def count(self, model: type) -> int:
        with self.db.transaction() as session:
            return int(session.scalar(select(func.count()).select_from(model)) or 0)

    def applied_events(self, message_id: int) -> list[str]:
        with self.db.transaction() as session:
            rows = session.scalars(
                select(MessageEvent)
                .where(
                    MessageEvent.message_id == message_id,
                    MessageEvent.source == "webhook",
                    MessageEvent.applied.is_(True),
                )
                .order_by(MessageEvent.id)
            )
            return [row.kind for row in rows]
