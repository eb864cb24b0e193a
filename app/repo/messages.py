"""Messages: creating them, reading them, their correlation ids and their ring."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.correlation import make_correlation_id
from app.correlation import parse_correlation_id as parse_correlation_id_under
from app.lifecycle import Source, Status
from app.models import Message
from app.repo.events import append_event
from app.repo.sql import insert_ignoring_conflict


def get_message(session: Session, message_id: int) -> Message | None:
    return session.get(Message, message_id, populate_existing=True)


def _correlation_key(session: Session) -> bytes:
    key = session.info.get("correlation_key")
    if not key:
        raise RuntimeError("this session has no correlation key (build it with Database)")
    return bytes(key)


def correlation_id_for(session: Session, message_id: int, cycle: int) -> str:
    """What we send the provider to find the message again (echoed in its webhooks)."""
    return make_correlation_id(_correlation_key(session), message_id, cycle)


def parse_correlation_id(session: Session, value: str | None) -> tuple[int, int] | None:
    """(message id, cycle) of one of our correlation ids; None for anything else."""
    return parse_correlation_id_under(_correlation_key(session), value)


@dataclass(frozen=True, slots=True)
class NewMessage:
    tenant_id: int
    identity_id: int
    recipient: str
    lane: str
    fingerprint: str
    body_text: str | None = None
    template: dict[str, Any] | None = None
    idempotency_key: str | None = None
    tag: str | None = None  # Messenger / Instagram message tag (HUMAN_AGENT)
    campaign: str | None = None
    not_before: datetime | None = None  # a `send_at` still ahead (`app/schedule.py`)
    expires_at: datetime | None = None


def create_message(session: Session, new: NewMessage, now: datetime) -> tuple[Message, bool]:
    """Insert a queued message; with an idempotency key already used, return that one.

    The partial unique index `(tenant_id, idempotency_key)` decides, never a read first:
    of two concurrent requests with one key exactly one inserts. Returns (message, created).
    """
    values = {
        "tenant_id": new.tenant_id,
        "identity_id": new.identity_id,
        "recipient": new.recipient,
        "lane": new.lane,
        "body_text": new.body_text,
        "template": new.template,
        "template_name": (new.template or {}).get("name"),
        "campaign": new.campaign,
        "recipient_tail": new.recipient[-4:],
        "tag": new.tag,
        "idempotency_key": new.idempotency_key,
        "fingerprint": new.fingerprint,
        "not_before": new.not_before,
        "expires_at": new.expires_at,
        "status": Status.QUEUED.value,
        "cycle": 1,
        "provider_key_cycle": 1,
        "attempt": 0,
        "unknown_attempts": 0,
        "rate_limited_attempts": 0,
        "had_unknown_outcome": False,
        "queued_at": now,
        "rung_at": now,
        "created_at": now,
    }
    message_id = insert_ignoring_conflict(
        session,
        Message.__table__,
        values,
        ["tenant_id", "idempotency_key"],
        conflict_where=Message.idempotency_key.is_not(None),
    )
    if message_id is None:
        existing = session.scalars(
            select(Message).where(
                Message.tenant_id == new.tenant_id,
                Message.idempotency_key == new.idempotency_key,
            )
        ).one()
        return existing, False
    session.execute(
        update(Message)
        .where(Message.id == message_id)
        .values(correlation_id=correlation_id_for(session, message_id, 1))
    )
    append_event(
        session,
        message_id=message_id,
        cycle=1,
        source=Source.API.value,
        kind="create",
        received_at=now,
        applied=True,
        to_status=Status.QUEUED.value,
    )
    message = get_message(session, message_id)
    assert message is not None
    return message, True


def mark_unrung(session: Session, message_id: int) -> None:
    """The ring did not reach Redis: let the sweeper's next pass ring it."""
    session.execute(update(Message).where(Message.id == message_id).values(rung_at=None))
