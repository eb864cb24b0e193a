"""Which message, and which cycle of it, a stored status is about: the reconciler's steps
1 (match) and 2 (adopt), and the statuses of an earlier cycle (stale: recorded on that
cycle, never applied). `app/repo/status_apply.py` runs them first for every status.

The lookups themselves, each locking the row it finds, are in `app/repo/matching.py`.
A double send (two provider ids for one cycle) is recorded here, for the webhook that
brings the second id and for the worker whose acceptance does (`app/repo/acceptance.py`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.lifecycle import PROVIDER_WORDS, Source
from app.repo.events import append_event
from app.repo.inbox import StoredStatus
from app.repo.matching import (
    LockedMessage,
    lock_message_by_attempt,
    lock_message_by_provider_id,
    lock_message_of_identity,
    record_provider_id,
)
from app.repo.messages import parse_correlation_id
from app.repo.transitions import apply_status

# The reconciler's log, as it always was (`app/late_statuses.py` writes to it too).
log = logging.getLogger("app.reconcile")


@dataclass(frozen=True, slots=True)
class Match:
    """The message a status applies to, locked, in the cycle the status belongs to."""

    message: LockedMessage
    cycle: int


@dataclass(frozen=True, slots=True)
class Stale:
    """The status names an earlier cycle of this message: recorded there, not applied."""

    message_id: int


# 1. Match ---------------------------------------------------------------------------


def match(session: Session, status: StoredStatus, now: datetime) -> Match | Stale | None:
    """The message this status is about, locked; None to park it.

    a. By the provider's message id, within the delivering identity.
    b. By our correlation id (the message id and cycle, keyed): this cycle's status
       adopts its provider id; an earlier cycle's is stale; a cycle with no attempt yet
       cannot have anything at the provider, so the status parks.
    c. By watermark (Messenger, Instagram): expanded before storing, by
       `watermark_statuses`, into statuses that match by id (a).
    d. By an attempt that recorded the provider id: an earlier cycle's (stale), or this
       cycle's from an attempt whose lease was lost before it wrote the id (adopted).
    """
    assert status.identity_id is not None
    if status.provider_message_id is not None:
        message = lock_message_by_provider_id(
            session, status.identity_id, status.provider_message_id
        )
        if message is not None:
            return Match(message, message.cycle)

    parsed = parse_correlation_id(session, status.correlation_id)
    if parsed is not None:
        message_id, cycle = parsed
        # Locks the row: a worker recording the provider id right now finishes first.
        message = lock_message_of_identity(session, message_id, status.identity_id)
        if message is not None and cycle == message.cycle:
            if message.attempt == 0:
                # No attempt in this cycle: nothing of ours can be at the provider, so no
                # provider can report on it. Parked: if an attempt later records this
                # provider id, the status applies then.
                return None
            adopt(session, message, status, now)
            return Match(message, cycle)
        if message is not None and cycle < message.cycle:
            record_stale(session, message, cycle, status, now)
            return Stale(message.id)

    if status.provider_message_id is None:
        return None
    by_attempt = lock_message_by_attempt(session, status.identity_id, status.provider_message_id)
    if by_attempt is None:
        return None
    cycle, message = by_attempt
    if cycle < message.cycle:
        record_stale(session, message, cycle, status, now)
        return Stale(message.id)
    adopt(session, message, status, now)
    return Match(message, cycle)


# 2. Adopt ---------------------------------------------------------------------------


def adopt(session: Session, message: LockedMessage, status: StoredStatus, now: datetime) -> None:
    """This cycle's status names a provider id: record it if none is known yet; a second,
    different id for the same cycle means the provider holds the message twice."""
    if status.provider_message_id is None:
        return
    if message.provider_message_id is None:
        record_provider_id(
            session, message.id, message.cycle, status.provider_message_id, status.provider_time
        )
    elif message.provider_message_id != status.provider_message_id:
        record_double_send(
            session,
            message.id,
            message.cycle,
            message.provider_message_id,
            status.provider_message_id,
            now,
        )


def record_double_send(
    session: Session,
    message_id: int,
    cycle: int,
    first_id: str | None,
    second_id: str | None,
    now: datetime,
) -> None:
    """Two provider ids for one correlation id and cycle: the provider has it twice."""
    log.error(
        "DOUBLE SEND: message %s cycle %s has provider ids %s and %s",
        message_id,
        cycle,
        first_id,
        second_id,
    )
    append_event(
        session,
        message_id=message_id,
        cycle=cycle,
        source=Source.WEBHOOK.value,
        kind="double_send",
        received_at=now,
        applied=False,
        detail={"provider_message_ids": [first_id, second_id]},
        dedupe_key=f"double_send:{message_id}:{cycle}:{second_id}",
    )


# 4. Stale: recorded on the earlier cycle, never applied ------------------------------


def record_stale(
    session: Session, message: LockedMessage, cycle: int, status: StoredStatus, now: datetime
) -> None:
    """An earlier cycle's status: the guard's cycle fence refuses it, and the event log
    keeps it on that cycle (a requeue reads it to see whether the provider holds a copy)."""
    target = PROVIDER_WORDS.get(status.status)
    if target is None:
        return
    apply_status(
        session,
        message.id,
        target,
        Source.WEBHOOK,
        now,
        provider_time=status.provider_time,
        cycle=cycle,
        dedupe_key=status.dedupe_key,
        detail={
            "provider_message_id": status.provider_message_id,
            "status": status.status,
            "why": "the provider id belongs to an earlier cycle",
        },
        known=message.state,
    )
