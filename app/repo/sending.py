"""The worker's writes: the fenced claim, the attempt rows, and each outcome's fenced record.

Every write after the claim carries `AND attempt = :mine AND cycle = :cycle`, so a worker
whose lease expired cannot overwrite the attempt that re-claimed the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import and_, case, func, insert, or_, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import Attempt, Identity, Message, MessageEvent
from app.providers.classification import rank_of
from app.repo.events import append_event
from app.repo.identities import get_identity, is_stale_for, pause_identity
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
    claimed_at: datetime  # our clock at the claim; the lease runs from here


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
            Message.pending_verdict,
            Identity.paused_at,
        )
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.id == message_id)
    ).first()
    if row is None or row.paused_at is not None or row.pending_verdict is not None:
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
            # A verdict owed is recorded by `take_verdict`, never sent again.
            Message.pending_verdict.is_(None),
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
        detail={
            "attempt": row.attempt + 1,
            "lease_lost": lease_lost,
            # When it was due: a claim is never earlier than its retry time.
            "due_at": row.next_attempt_at.isoformat() if row.next_attempt_at else None,
        },
    )
    return Claim(message_id, row.identity_id, row.cycle, row.attempt + 1, lease_lost, now)


def claim_batch(
    session: Session,
    identity_id: int,
    lane: str,
    limit: int,
    now: datetime,
    lease: timedelta,
    *,
    skip_recipients: list[str] | None = None,
) -> list[Claim]:
    """Claim up to `limit` due messages of one identity and lane for one attempt each.

    1. Pick them in one `SELECT ... FOR UPDATE SKIP LOCKED` (PostgreSQL): drains of the same
       identity never wait on each other's rows. SQLite serialises writers instead.
    2. Move them in one UPDATE computing each row's values from its own state, exactly as
       `claim_message` does for one (the rows are locked, so the state read is the state
       written over), and append one claim event each in one INSERT.
    A paused identity claims nothing; a message owing a verdict is left to `take_verdict`.
    """
    if limit <= 0:
        return []
    paused = session.scalar(select(Identity.paused_at).where(Identity.id == identity_id))
    if paused is not None:
        return []
    query = (
        select(
            Message.id,
            Message.status,
            Message.cycle,
            Message.attempt,
            Message.next_attempt_at,
            Message.lease_until,
        )
        .where(
            Message.identity_id == identity_id,
            Message.lane == lane,
            is_due(now),
            Message.pending_verdict.is_(None),
        )
        .order_by(Message.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    if skip_recipients:
        query = query.where(Message.recipient.not_in(skip_recipients))
    rows = session.execute(query).all()
    if not rows:
        return []
    claims = []
    for row in rows:
        lease_lost = (
            row.status == Status.SENDING.value
            and row.lease_until is not None
            and row.lease_until < now
            and (row.next_attempt_at is None or row.next_attempt_at > now)
        )
        claims.append(
            (Claim(row.id, identity_id, row.cycle, row.attempt + 1, lease_lost, now), row)
        )
    ids = [claim.message_id for claim, _ in claims]
    lost = [claim.message_id for claim, _ in claims if claim.lease_lost]
    queued = Message.status == Status.QUEUED.value
    values: dict[str, Any] = {
        "status": Status.SENDING.value,
        "attempt": Message.attempt + 1,
        "next_attempt_at": None,
        "lease_until": now + lease,
        "last_attempt_at": now,
        "request_started_ms": int(now.timestamp() * 1000),
        "sending_at": case((queued, now), else_=Message.sending_at),
    }
    if lost:
        values["unknown_attempts"] = case(
            (Message.id.in_(lost), Message.unknown_attempts + 1), else_=Message.unknown_attempts
        )
        values["had_unknown_outcome"] = case(
            (Message.id.in_(lost), True), else_=Message.had_unknown_outcome
        )
    session.execute(
        update(Message)
        .where(Message.id.in_(ids))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        insert(MessageEvent),
        [
            {
                "message_id": claim.message_id,
                "cycle": claim.cycle,
                "source": Source.WORKER.value,
                "kind": "claim",
                "from_status": row.status,
                "to_status": Status.SENDING.value,
                "applied": True,
                "received_at": now,
                "detail": {
                    "attempt": claim.attempt,
                    "lease_lost": claim.lease_lost,
                    "due_at": row.next_attempt_at.isoformat() if row.next_attempt_at else None,
                    "batch": len(claims),
                },
            }
            for claim, row in claims
        ],
    )
    return [claim for claim, _ in claims]


def earliest_due(session: Session, identity_id: int, lane: str, now: datetime) -> datetime | None:
    """When this identity and lane next has something due: a retry, a verdict, or a lease
    that will expire (None: nothing is waiting)."""
    waiting = [
        session.scalar(
            select(func.min(column)).where(
                Message.identity_id == identity_id,
                Message.lane == lane,
                Message.status == Status.SENDING.value,
                column > now,
            )
        )
        for column in (Message.next_attempt_at, Message.lease_until)
    ]
    times = [t for t in waiting if t is not None]
    return min(times) if times else None


def due_again_at(session: Session, message_id: int, now: datetime) -> tuple[str, datetime] | None:
    """(lane, time) when a message that is not due yet will be: its retry or its verdict.

    RQ keeps a scheduled time to whole seconds, so a ring can arrive just before the
    message's `next_attempt_at`; the job rings it again for that time instead of leaving
    it to the sweeper. A lease in flight is not rung: its holder rings what comes next.
    """
    row = session.execute(
        select(Message.lane, Message.status, Message.next_attempt_at).where(
            Message.id == message_id
        )
    ).first()
    if row is None or row.status != Status.SENDING.value or row.next_attempt_at is None:
        return None
    if row.next_attempt_at <= now:
        return None
    return row.lane, row.next_attempt_at


def take_verdict(session: Session, message_id: int, now: datetime) -> Transition | None:
    """Record the verdict a message owes once its grace wait is over (no provider call).

    The last unknown outcome of a cycle is not failed at once: like every unknown it
    waits the webhook grace, because the provider may have the message and say so. If a
    webhook moved it meanwhile there is nothing to do; otherwise the verdict (`exhausted`)
    is recorded now, fenced on the attempt that earned it: a verdict, not an attempt.
    """
    row = session.execute(
        select(
            Message.status,
            Message.cycle,
            Message.attempt,
            Message.pending_verdict,
            Message.next_attempt_at,
            Message.last_error,
            Identity.provider,
        )
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.id == message_id)
    ).first()
    if row is None or row.pending_verdict is None or row.status != Status.SENDING.value:
        return None
    if row.next_attempt_at is not None and row.next_attempt_at > now:
        return None
    error = row.last_error or {}
    return apply_status(
        session,
        message_id,
        Status.FAILED,
        Source.WORKER,
        now,
        cycle=row.cycle,
        attempt=row.attempt,
        kind="failed",
        detail={"failure_class": row.pending_verdict, "error": row.last_error, "verdict": True},
        extra_values={
            "failure_class": row.pending_verdict,
            "pending_verdict": None,
            "next_attempt_at": None,
            "lease_until": None,
            "dead_letter_rank": rank_of(row.provider, row.pending_verdict, error.get("code")),
        },
    )


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


def record_late_acceptance(
    session: Session, claim: Claim, provider_message_id: str, now: datetime
) -> Transition | None:
    """The provider accepted an attempt whose fence no longer holds (its lease expired and
    the message was re-claimed). The acceptance is still a fact about this cycle: the
    provider has the message, so no retry may send it again. Record the id and `sent`
    unless the row knows another id already (then the provider has it twice: flagged).
    None if the message has moved to a new cycle since (the attempt row keeps the id)."""
    row = session.execute(
        select(Message.cycle, Message.provider_message_id)
        .where(Message.id == claim.message_id)
        .with_for_update()
    ).first()
    if row is None or row.cycle != claim.cycle:
        return None
    if row.provider_message_id not in (None, provider_message_id):
        record_double_send(
            session,
            claim.message_id,
            claim.cycle,
            row.provider_message_id,
            provider_message_id,
            now,
        )
        return None
    session.execute(
        update(Message)
        .where(
            Message.id == claim.message_id,
            Message.cycle == claim.cycle,
            Message.provider_message_id.is_(None),
        )
        .values(provider_message_id=provider_message_id)
    )
    transition = apply_status(
        session,
        claim.message_id,
        Status.SENT,
        Source.WORKER,
        now,
        cycle=claim.cycle,
        kind="accepted",
        detail={"provider_message_id": provider_message_id, "late": True, "attempt": claim.attempt},
        extra_values={"next_attempt_at": None, "pending_verdict": None, "failure_class": None},
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
    verdict: str | None = None,
) -> bool:
    """Stay `sending` until `at`; with a `verdict`, what to record then instead of sending."""
    values = _outcome_values(
        failure_class, error, unknown_attempts, rate_limited_attempts, had_unknown
    )
    values["next_attempt_at"] = at
    values["pending_verdict"] = verdict
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
    extra["pending_verdict"] = None
    provider = session.scalar(select(Identity.provider).where(Identity.id == claim.identity_id))
    extra["dead_letter_rank"] = rank_of(provider or "", failure_class, (error or {}).get("code"))
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
) -> Hold:
    """The sender is broken: pause its identity; the message waits with no next attempt.

    Unless the identity was resumed or given new credentials after this attempt's claim:
    then the answer is stale (the old token's), the identity stays active, and the
    message is due again at once. The attempt is not counted either way.
    """
    paused = pause_identity(
        session, claim.identity_id, reason, now, unless_changed_since=claim.claimed_at
    )
    identity = None if paused else get_identity(session, claim.identity_id)
    if identity is not None and is_stale_for(identity, claim.claimed_at):
        retried = rows_changed(
            session,
            update(Message)
            .where(*fenced(claim), Message.status == Status.SENDING.value)
            .values(next_attempt_at=now, lease_until=None, rung_at=now),
        )
        if retried != 1:
            return Hold.NOT_RECORDED
        append_event(
            session,
            message_id=claim.message_id,
            cycle=claim.cycle,
            source=Source.WORKER.value,
            kind="stale_sender_broken",
            received_at=now,
            applied=False,
            detail={
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
    if not held:
        return Hold.NOT_RECORDED
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
