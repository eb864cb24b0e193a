"""The worker's writes: the fenced claim, the attempt rows, and each outcome's fenced record.

Every write after the claim carries `AND attempt = :mine AND cycle = :cycle`, so a worker
whose lease expired cannot overwrite the attempt that re-claimed the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import Attempt, Identity, Message
from app.repo.events import append_event
from app.repo.identities import pause_identity
from app.repo.messages import Transition, apply_status
from app.repo.sql import rows_changed
from app.repo.webhooks import apply_parked, record_double_send


@dataclass(frozen=True, slots=True)
class Claim:
    message_id: int
    identity_id: int
    cycle: int
    attempt: int
    lease_lost: bool  # re-claimed after another worker's lease expired: that outcome is unknown


def is_due(now: datetime) -> Any:
    """A message a worker may claim now (identity active is checked separately)."""
    return or_(
        Message.status == Status.QUEUED.value,
        and_(
            Message.status == Status.SENDING.value,
            or_(
                and_(Message.next_attempt_at.is_not(None), Message.next_attempt_at <= now),
                and_(Message.lease_until.is_not(None), Message.lease_until < now),
                # Held for a broken sender (no next attempt, no lease): due once its identity
                # is active again, even if a pause and a resume raced each other.
                and_(Message.next_attempt_at.is_(None), Message.lease_until.is_(None)),
            ),
        ),
    )


def claim_message(
    session: Session, message_id: int, now: datetime, lease: timedelta
) -> Claim | None:
    """Take the message for one attempt, or None if it is not ours to send now.

    One compare-and-set on the state just read: `queued`, or `sending` and due (its retry
    time has come, or the previous worker's lease expired), and its identity active.
    """
    row = session.execute(
        select(
            Message.status,
            Message.cycle,
            Message.attempt,
            Message.identity_id,
            Message.next_attempt_at,
            Message.lease_until,
            Identity.paused_at,
        )
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.id == message_id)
    ).first()
    if row is None or row.paused_at is not None:
        return None
    if row.status not in (Status.QUEUED.value, Status.SENDING.value):
        return None
    lease_lost = (
        row.status == Status.SENDING.value
        and row.lease_until is not None
        and row.lease_until < now
        and (row.next_attempt_at is None or row.next_attempt_at > now)
    )
    values: dict[str, Any] = {
        "status": Status.SENDING.value,
        "attempt": row.attempt + 1,
        "next_attempt_at": None,
        "lease_until": now + lease,
        "last_attempt_at": now,
        "request_started_ms": int(now.timestamp() * 1000),
    }
    if row.status == Status.QUEUED.value:
        values["sending_at"] = now
    if lease_lost:
        # The attempt whose lease expired never reported: an unknown outcome, counted here
        # in the claim itself so that workers dying one after another still reach the cap.
        values["unknown_attempts"] = Message.unknown_attempts + 1
        values["had_unknown_outcome"] = True
    paused = select(Identity.paused_at).where(Identity.id == Message.identity_id)
    changed = rows_changed(
        session,
        update(Message)
        .where(
            Message.id == message_id,
            Message.status == row.status,
            Message.cycle == row.cycle,
            Message.attempt == row.attempt,
            is_due(now),
            paused.scalar_subquery().is_(None),
        )
        .values(**values)
        .execution_options(synchronize_session=False),
    )
    if changed != 1:
        return None  # another worker, a webhook or an operator got there first
    append_event(
        session,
        message_id=message_id,
        cycle=row.cycle,
        source=Source.WORKER.value,
        kind="claim",
        received_at=now,
        applied=True,
        from_status=row.status,
        to_status=Status.SENDING.value,
        detail={"attempt": row.attempt + 1, "lease_lost": lease_lost},
    )
    return Claim(message_id, row.identity_id, row.cycle, row.attempt + 1, lease_lost)


def start_attempt(session: Session, claim: Claim, provider_key: str, now: datetime) -> None:
    session.add(
        Attempt(
            message_id=claim.message_id,
            cycle=claim.cycle,
            number=claim.attempt,
            provider_key=provider_key,
            started_at=now,
        )
    )
    session.flush()


def finish_attempt(
    session: Session,
    claim: Claim,
    now: datetime,
    outcome: str,
    *,
    http_status: int | None = None,
    provider_message_id: str | None = None,
    error: dict[str, Any] | None = None,
    response_body: str | None = None,
) -> None:
    session.execute(
        update(Attempt)
        .where(
            Attempt.message_id == claim.message_id,
            Attempt.cycle == claim.cycle,
            Attempt.number == claim.attempt,
        )
        .values(
            finished_at=now,
            outcome=outcome,
            http_status=http_status,
            provider_message_id=provider_message_id,
            error=error,
            response_body=response_body,
        )
    )


def mark_lost_attempt(session: Session, claim: Claim, now: datetime) -> None:
    """The attempt before a lease-expired re-claim never reported: its outcome is unknown."""
    session.execute(
        update(Attempt)
        .where(
            Attempt.message_id == claim.message_id,
            Attempt.cycle == claim.cycle,
            Attempt.number == claim.attempt - 1,
            Attempt.finished_at.is_(None),
        )
        .values(outcome="unknown", error={"message": "the worker's lease expired mid-call"})
    )


def fenced(claim: Claim) -> list[Any]:
    return [
        Message.id == claim.message_id,
        Message.cycle == claim.cycle,
        Message.attempt == claim.attempt,
    ]


def record_accepted(
    session: Session,
    claim: Claim,
    provider_message_id: str,
    now: datetime,
    *,
    unknown_attempts: int,
    had_unknown: bool,
) -> Transition | None:
    """The provider accepted: keep its id, move to `sent`, apply statuses that came early.

    Returns None when the write is stale (our lease was taken over): nothing is changed.
    """
    current = session.execute(
        select(Message.provider_message_id).where(*fenced(claim)).with_for_update()
    ).first()
    if current is None:
        return None
    if current.provider_message_id not in (None, provider_message_id):
        record_double_send(
            session,
            claim.message_id,
            claim.cycle,
            current.provider_message_id,
            provider_message_id,
            now,
        )
    values: dict[str, Any] = {
        "provider_message_id": current.provider_message_id or provider_message_id,
        "lease_until": None,
        "unknown_attempts": unknown_attempts,
    }
    if had_unknown:
        values["had_unknown_outcome"] = True
    session.execute(update(Message).where(*fenced(claim)).values(**values))
    # A retry's class no longer describes it, unless a `failed` webhook got here first.
    session.execute(
        update(Message)
        .where(*fenced(claim), Message.status != Status.FAILED.value)
        .values(failure_class=None)
    )
    transition = apply_status(
        session,
        claim.message_id,
        Status.SENT,
        Source.WORKER,
        now,
        cycle=claim.cycle,
        attempt=claim.attempt,
        kind="accepted",
        detail={"provider_message_id": provider_message_id},
    )
    apply_parked(session, claim.identity_id, provider_message_id, now)
    return transition


def _outcome_values(
    failure_class: str,
    error: dict[str, Any] | None,
    unknown_attempts: int,
    rate_limited_attempts: int,
    had_unknown: bool,
) -> dict[str, Any]:
    """What every recorded failure writes: its class, the verbatim error, the counters."""
    values: dict[str, Any] = {
        "failure_class": failure_class,
        "last_error": error,
        "lease_until": None,
        "unknown_attempts": unknown_attempts,
        "rate_limited_attempts": rate_limited_attempts,
    }
    if had_unknown:
        values["had_unknown_outcome"] = True  # never reset within a cycle
    return values


def record_retry(
    session: Session,
    claim: Claim,
    at: datetime,
    *,
    failure_class: str,
    error: dict[str, Any] | None,
    unknown_attempts: int,
    rate_limited_attempts: int,
    had_unknown: bool,
) -> bool:
    values = _outcome_values(
        failure_class, error, unknown_attempts, rate_limited_attempts, had_unknown
    )
    values["next_attempt_at"] = at
    # Rung for that time (RQ's scheduler); the sweeper re-rings only if it stays due.
    values["rung_at"] = at
    return (
        rows_changed(
            session,
            update(Message)
            .where(*fenced(claim), Message.status == Status.SENDING.value)
            .values(**values),
        )
        == 1
    )


def record_failed(
    session: Session,
    claim: Claim,
    now: datetime,
    *,
    failure_class: str,
    error: dict[str, Any] | None,
    unknown_attempts: int,
    rate_limited_attempts: int,
    had_unknown: bool,
) -> Transition:
    extra = _outcome_values(
        failure_class, error, unknown_attempts, rate_limited_attempts, had_unknown
    )
    extra["next_attempt_at"] = None
    return apply_status(
        session,
        claim.message_id,
        Status.FAILED,
        Source.WORKER,
        now,
        cycle=claim.cycle,
        attempt=claim.attempt,
        kind="failed",
        detail={"failure_class": failure_class, "error": error},
        extra_values=extra,
    )


def record_held(
    session: Session,
    claim: Claim,
    now: datetime,
    *,
    error: dict[str, Any] | None,
    reason: str,
) -> bool:
    """The sender is broken: pause its identity; the message waits with no next attempt."""
    pause_identity(session, claim.identity_id, reason, now)
    held = (
        rows_changed(
            session,
            update(Message)
            .where(*fenced(claim), Message.status == Status.SENDING.value)
            .values(
                next_attempt_at=None,
                lease_until=None,
                failure_class="sender_broken",
                last_error=error,
            ),
        )
        == 1
    )
    if held:
        append_event(
            session,
            message_id=claim.message_id,
            cycle=claim.cycle,
            source=Source.WORKER.value,
            kind="held",
            received_at=now,
            applied=False,
            detail={"reason": reason, "error": error},
        )
    return held


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
