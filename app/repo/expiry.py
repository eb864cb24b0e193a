"""Expired messages: failed, never sent late (docs/design.md section 7, "Scheduled and
expiring messages").

A message whose `expires_at` has passed is never claimed (`unexpired` in
`app/repo/claimable.py`); its drain fails it here at the start of each step, with failure
class `expired` and no dead-letter rank (off the actionable list by default). Only a
message no call holds now: queued, or sending between attempts (a retry due). One in
flight is stopped by the pre-call check (`jobs/call.py`); one owing a verdict, or whose
lease lapsed (an unknown outcome: the provider may have it), is left to its verdict.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import Message
from app.providers.base import FailureClass
from app.repo.claimable import is_due, is_waiting
from app.repo.transitions import apply_status

EXPIRED = FailureClass.EXPIRED.value


def expired_error(expires_at: datetime | None) -> dict[str, object]:
    when = expires_at.isoformat() if expires_at else "its expiry"
    return {
        "provider": "ratchet",
        "code": None,
        "title": "Expired before it was sent",
        "message": f"not called by {when}: never sent late",
    }


def expire_due(
    session: Session, identity_id: int, lane: str, now: datetime, limit: int = 500
) -> list[int]:
    """Fail this identity and lane's expired messages no call holds; their ids."""
    rows = session.execute(
        select(Message.id, Message.status, Message.cycle, Message.attempt, Message.expires_at)
        .where(
            Message.identity_id == identity_id,
            Message.lane == lane,
            is_waiting(),
            Message.expires_at <= now,
            Message.pending_verdict.is_(None),
            # A lapsed lease's outcome is unknown: re-claimed with no call (`unexpired`).
            Message.lease_until.is_(None),
            # Due: queued (whenever its `send_at`), or sending with no call holding it.
            is_due(now) | (Message.status == Status.QUEUED.value),
        )
        .order_by(Message.id)
        .limit(limit)
        .with_for_update(skip_locked=True, key_share=True)
    ).all()
    failed = []
    for row in rows:
        result = apply_status(
            session,
            row.id,
            Status.FAILED,
            Source.WORKER,
            now,
            cycle=row.cycle,
            attempt=row.attempt,
            kind="expired",
            detail={"failure_class": EXPIRED, "expires_at": row.expires_at.isoformat()},
            known=(Status(row.status), row.cycle, row.attempt),
            extra_values={
                "failure_class": EXPIRED,
                "dead_letter_rank": None,
                "next_attempt_at": None,
                "lease_until": None,
                "last_error": expired_error(row.expires_at),
            },
        )
        if result.applied:
            failed.append(row.id)
    return failed
