"""A WhatsApp identity's messages as its webhook finds them (claimed, sent), its signed
deliveries to `/webhooks/whatsapp`, its statuses as the reconciler is handed them (`incoming`,
`record`), and the rows read back: shared by the webhook, reconciler, callback and alert tests.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clock import utcnow
from app.db import Database
from app.models import MessageEvent
from app.reconcile import Recorded, record_delivery
from app.repo.acceptance import record_accepted
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.identities import update_identity
from app.repo.inbox import IncomingStatus

from .conftest import T0, at
from .factories import World, make_message
from .meta import sign

SECRET = "meta-app-secret"
LEASE = timedelta(seconds=25)
UNKNOWN = "999999"  # a phone number id no identity has


def deliver(client: FlaskClient, raw: bytes, secret: str = SECRET, signature: str | None = None):
    headers = {"Content-Type": "application/json"}
    if signature is not None or secret:
        headers["X-Hub-Signature-256"] = signature or sign(raw, secret)
    return client.post("/webhooks/whatsapp", data=raw, headers=headers)


def claimed(db: Database, world: World, **kwargs: object):
    message_id = make_message(db, world, **kwargs)  # type: ignore[arg-type]
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", T0)
    return claim


def sent_message(db: Database, world: World, wamid: str) -> int:
    claim = claimed(db, world)
    with db.transaction() as session:
        record_accepted(
            session, claim, wamid, T0 + timedelta(seconds=1), unknown_attempts=0, had_unknown=False
        )
    return claim.message_id


def webhook_events(db: Database, message_id: int) -> list[MessageEvent]:
    with db.transaction() as session:
        return list(
            session.scalars(
                select(MessageEvent)
                .where(MessageEvent.message_id == message_id, MessageEvent.source == "webhook")
                .order_by(MessageEvent.id)
            )
        )


def set_app_secret(app: Flask, session: Session, identity_id: int, secret: str) -> None:
    """`identity update --app-secret`, in the caller's transaction."""
    update_identity(
        session, app.extensions["ratchet.box"], identity_id, app_secret=secret, now=utcnow()
    )


def incoming(world: World, wamid: str, word: str, seconds: int, **kwargs: Any) -> IncomingStatus:
    return IncomingStatus(
        identity_id=world.identity_id,
        provider="whatsapp",
        provider_message_id=wamid,
        status=word,
        provider_time=at(seconds),
        **kwargs,
    )


def record(database: Database, status: IncomingStatus, seconds: int = 30) -> Recorded:
    with database.transaction() as session:
        return record_delivery(
            session,
            provider="whatsapp",
            identity_id=status.identity_id,
            headers={"X-Test": "1"},
            body="{}",
            now=at(seconds),
            statuses=[status],
        )
