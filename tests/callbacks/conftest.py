"""Delivery tests: committed rows, a real receiver on 127.0.0.1, the clock passed in."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from flask import Flask
from sqlalchemy import select

from app.callback_models import PENDING, Callback, CallbackEndpoint
from app.config import Config
from app.crypto import SecretBox
from app.db import Database
from app.lifecycle import Source, Status
from app.repo.callback_endpoints import EVENTS, create_endpoint
from app.repo.failures import record_failed
from app.repo.transitions import apply_status
from jobs.callbacks import deliver_due

from ..conftest import SECRET_KEY, T0, at, make_app
from ..factories import World
from ..whatsapp_world import claimed, sent_message

__all__ = ["sent_message"]
from .receiver import Receiver

BOX = SecretBox(SECRET_KEY)


@pytest.fixture
def app(pg_url: str, redis_url: str) -> Iterator[Flask]:
    made = make_app(
        pg_url,
        redis_url,
        callback_allow_hosts=("127.0.0.1",),
        callback_timeout=0.5,
        callback_concurrency=4,
    )
    with made.app_context():
        yield made
    made.extensions["ratchet.db"].dispose()
    made.extensions["ratchet.redis"].close()


def add_endpoint(db: Database, world: World, receiver: Receiver) -> int:
    with db.transaction() as session:
        endpoint, secret = create_endpoint(
            session,
            BOX,
            tenant_id=world.tenant_id,
            url=receiver.url,
            host="127.0.0.1",
            events=list(EVENTS),
            now=T0,
        )
    receiver.secret = secret
    return endpoint.id


def webhook(db: Database, message_id: int, word: str, seconds: float) -> None:
    with db.transaction() as session:
        apply_status(
            session,
            message_id,
            Status(word),
            Source.WEBHOOK,
            at(seconds),
            provider_time=at(seconds),
            dedupe_key=f"test:{message_id}:{word}",
        )


def delivered_message(db: Database, world: World, wamid: str) -> int:
    """sent, delivered, read: three changes."""
    message_id = sent_message(db, world, wamid)
    webhook(db, message_id, "delivered", 5)
    webhook(db, message_id, "read", 6)
    return message_id


def failed_message(db: Database, world: World) -> int:
    claim = claimed(db, world)
    error = {"provider": "whatsapp", "code": 131026, "message": "Message Undeliverable."}
    with db.transaction() as session:
        record_failed(
            session,
            claim,
            at(2),
            failure_class="permanent",
            error=error,
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
    return claim.message_id


def outbox(db: Database, endpoint_id: int | None = None) -> list[Callback]:
    with db.transaction() as session:
        query = select(Callback).order_by(Callback.id)
        if endpoint_id is not None:
            query = query.where(Callback.endpoint_id == endpoint_id)
        return list(session.scalars(query))


def endpoint_row(db: Database, endpoint_id: int) -> CallbackEndpoint:
    with db.transaction() as session:
        row = session.get(CallbackEndpoint, endpoint_id, populate_existing=True)
        assert row is not None
        return row


def run_until_settled(
    db: Database, config: Config, endpoint_id: int, start: datetime, limit: int = 60
) -> datetime:
    """Deliver, then move the clock to the next retry's time; until nothing is pending (or
    the endpoint is disabled). Returns the clock's last time."""
    now = start
    for _ in range(limit):
        deliver_due(db, BOX, config, endpoint_id, lambda t=now: t)
        pending = [c for c in outbox(db, endpoint_id) if c.state == PENDING]
        if not pending or not endpoint_row(db, endpoint_id).enabled:
            return now
        # Rows due already wait behind an earlier one of their message: the next retry.
        later = [c.next_attempt_at for c in pending if c.next_attempt_at > now]
        if not later:
            break
        now = min(later) + timedelta(milliseconds=1)
    left = [(c.id, c.attempts, c.next_attempt_at, c.last_status, c.last_error) for c in pending]
    raise AssertionError(f"callbacks still pending at {now}: {left}")


def with_config(app: Flask, **changes: object) -> Config:
    return dataclasses.replace(app.config["RATCHET"], **changes)
