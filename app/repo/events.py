"""The append-only event log of every message."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import MessageEvent
from app.repo.sql import insert_ignoring_conflict


def append_event(
    session: Session,
    *,
    message_id: int,
    cycle: int,
    source: str,
    kind: str,
    received_at: datetime,
    applied: bool,
    from_status: str | None = None,
    to_status: str | None = None,
    refusal: str | None = None,
    provider_time: datetime | None = None,
    actor: str | None = None,
    detail: dict[str, Any] | None = None,
    dedupe_key: str | None = None,
    flush: bool = True,
) -> int | None:
    """Append an event; returns its id, or None when `dedupe_key` was already recorded.

    With `flush=False` (no dedupe key) the row is written with the unit of work's next
    flush, in one INSERT with its neighbours, and None is returned."""
    values = {
        "message_id": message_id,
        "cycle": cycle,
        "source": source,
        "kind": kind,
        "from_status": from_status,
        "to_status": to_status,
        "applied": applied,
        "refusal": refusal,
        "provider_time": provider_time,
        "received_at": received_at,
        "actor": actor,
        "detail": detail,
        "dedupe_key": dedupe_key,
    }
    if dedupe_key is None:
        event = MessageEvent(**values)
        session.add(event)
        if not flush:
            return None
        session.flush()
        return event.id
    return insert_ignoring_conflict(
        session,
        MessageEvent.__table__,
        values,
        ["dedupe_key"],
    )


def note_worker_event(
    session: Session,
    message_id: int,
    cycle: int,
    kind: str,
    now: datetime,
    detail: dict[str, Any],
) -> None:
    """A worker's note on a message that moves nothing (held, stood down, a stale answer)."""
    append_event(
        session,
        message_id=message_id,
        cycle=cycle,
        source="worker",
        kind=kind,
        received_at=now,
        applied=False,
        detail=detail,
    )


def list_events(session: Session, message_id: int) -> list[MessageEvent]:
    query = select(MessageEvent).where(MessageEvent.message_id == message_id)
    return list(session.scalars(query.order_by(MessageEvent.id)))


def requeues_since(
    session: Session, message_ids: list[int], since: datetime
) -> dict[int, MessageEvent]:
    """The latest requeue of each of `message_ids` applied at or after `since`."""
    if not message_ids:
        return {}
    query = select(MessageEvent).where(
        MessageEvent.message_id.in_(message_ids),
        MessageEvent.kind == "requeue",
        MessageEvent.applied.is_(True),
        MessageEvent.received_at >= since,
    )
    return {event.message_id: event for event in session.scalars(query.order_by(MessageEvent.id))}
