"""A message given back with no outcome: an attempt that made no call (`release_unsent`),
a sender found broken (`record_held`: its identity paused, the message held), and the held
messages released when it is resumed (`release_held`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Message
from app.repo.attempts import fenced, finish_attempt
from app.repo.claims import Claim
from app.repo.events import note_worker_event
from app.repo.identities import get_identity, is_stale_for, pause_identity
from app.repo.sql import keyed, rows_changed


def release_unsent(session: Session, claim: Claim, now: datetime) -> bool:
    """An attempt that made no call gives its message back: due again now, its lease
    cleared, the attempt counted against no cap (no request left, so no outcome to wait
    for), and its attempt row finished `stood_down`. Fenced on the attempt and cycle, and
    on `sending`: a worker whose lease was re-claimed meanwhile (or whose message an
    earlier attempt's webhook moved on) changes nothing. False: it was not ours to give."""
    # Unless a re-claim already marked it unknown (`mark_lost_attempt`): that stays.
    finish_attempt(session, claim, now, "stood_down", unmarked_only=True)
    changed = rows_changed(
        session,
        update(Message)
        .where(*fenced(claim), keyed(Message.status == Status.SENDING.value))
        .values(next_attempt_at=now, lease_until=None),
    )
    return changed == 1


class Hold(StrEnum):
    HELD = "held"  # the identity is paused; the message waits with no next attempt
    STALE = "stale"  # the answer was given to credentials since replaced: due again now
    NOT_RECORDED = "not_recorded"  # fenced off: a webhook got further, or a re-claim


def record_held(
    session: Session,
    claim: Claim,
    now: datetime,
    *,
    error: dict[str, Any] | None,
    reason: str,
    credentials_version: int | None = None,
) -> Hold:
    """The sender is broken: pause its identity; the message waits with no next attempt.

    Unless the identity was resumed or given new credentials after this attempt's claim:
    then the answer is stale (the old token's), the identity stays active, and the
    message is due again at once. The attempt is not counted either way.
    """
    paused = pause_identity(
        session,
        claim.identity_id,
        reason,
        now,
        unless_changed_since=claim.claimed_at,
        credentials_version=credentials_version,
    )
    identity = None if paused else get_identity(session, claim.identity_id)
    if identity is not None and is_stale_for(identity, claim.claimed_at, credentials_version):
        retried = rows_changed(
            session,
            update(Message)
            .where(*fenced(claim), keyed(Message.status == Status.SENDING.value))
            .values(next_attempt_at=now, lease_until=None, rung_at=now),
        )
        if retried != 1:
            return Hold.NOT_RECORDED
        note_worker_event(
            session,
            claim.message_id,
            claim.cycle,
            "stale_sender_broken",
            now,
            {
                "reason": reason,
                "error": error,
                "why": "the identity was resumed or given new credentials after this attempt "
                "was claimed; the answer was the old credentials'",
            },
        )
        return Hold.STALE
    held = (
        rows_changed(
            session,
            update(Message)
            .where(*fenced(claim), keyed(Message.status == Status.SENDING.value))
            .values(
                next_attempt_at=None,
                lease_until=None,
                failure_class="sender_broken",
                last_error=error,
            ),
        )
        == 1
    )
    if not held:
        return Hold.NOT_RECORDED
    note_worker_event(
        session, claim.message_id, claim.cycle, "held", now, {"reason": reason, "error": error}
    )
    return Hold.HELD


def release_held(session: Session, identity_id: int, now: datetime) -> list[tuple[int, str]]:
    """After a resume: every message the pause held, due at once. Returns (id, lane) to ring."""
    waiting = select(Message.id, Message.lane).where(
        Message.identity_id == identity_id,
        or_(
            Message.status == Status.QUEUED.value,
            and_(
                Message.status == Status.SENDING.value,
                Message.next_attempt_at.is_(None),
                Message.lease_until.is_(None),
            ),
        ),
    )
    rows = [(row.id, row.lane) for row in session.execute(waiting)]
    session.execute(
        update(Message)
        .where(
            Message.identity_id == identity_id,
            Message.status == Status.SENDING.value,
            Message.next_attempt_at.is_(None),
            Message.lease_until.is_(None),
        )
        .values(next_attempt_at=now)
    )
    return rows
