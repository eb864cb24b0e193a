"""The reconciler: each stored webhook status matched to its message and applied, refused or
parked.

Lock order, everywhere: the message row first, then the status row. The worker that
records a provider id holds the message row and then applies the parked statuses; a
webhook that matches by correlation id takes the message row before claiming its status.
So the two cannot deadlock, and with the sweeper retrying parked statuses, cannot miss.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.lifecycle import PROVIDER_WORDS, Source, Status
from app.models import Attempt, Message, WebhookStatus
from app.providers.classification import rank_of
from app.repo.events import append_event
from app.repo.inbox import Result, claim_status, finish_status, parked_status_ids
from app.repo.messages import apply_status, parse_correlation_id

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Match:
    message_id: int
    cycle: int


def apply_webhook_status(session: Session, status_id: int, now: datetime) -> str:
    """Match one stored status to its message and apply it; returns a `Result` word.

    1. Match by provider id within the delivering identity, else by our correlation id
       (adopting the provider id if none is recorded; two ids for one correlation id and
       cycle are a double send), else by an earlier cycle's attempts (recorded, not
       applied). Nothing matched: parked, for the worker or the sweeper to apply later.
    2. Claim the status row (`applied_at IS NULL`), so two appliers cannot both apply it.
    3. Apply through the state machine, deduplicated by (provider, provider id, status).
    """
    row = session.get(WebhookStatus, status_id, populate_existing=True)
    if row is None or row.applied_at is not None:
        return Result.DUPLICATE
    if row.identity_id is None:  # a number we do not know: nothing of ours can match it
        if claim_status(session, status_id):
            finish_status(session, status_id, now, Result.UNMATCHED, None)
        return Result.UNMATCHED
    target = PROVIDER_WORDS.get(row.status)
    match, stale = _match(session, row, now)
    if not claim_status(session, status_id):
        return Result.DUPLICATE
    if match is None:
        finish_status(
            session,
            status_id,
            None if stale is None else now,
            Result.PARKED if stale is None else Result.STALE,
            stale,
        )
        return Result.PARKED if stale is None else Result.STALE
    if target is None:
        finish_status(session, status_id, now, Result.IGNORED, match.message_id)
        return Result.IGNORED

    payload = row.payload or {}
    errors = payload.get("errors") or []
    extra: dict[str, Any] = {}
    if target is Status.FAILED:
        no_reason = {"provider": row.provider, "message": "failed, no reason given"}
        last_error = errors[0] if errors else no_reason
        failure_class = payload.get("failure_class") or "needs_human"
        extra = {
            "last_error": last_error,
            "failure_class": failure_class,
            "dead_letter_rank": rank_of(row.provider, failure_class, last_error.get("code")),
            "next_attempt_at": None,
            "pending_verdict": None,
            # The lease stays: a retry may still be in flight, and a requeue must wait for it.
        }
    else:
        # The provider has it: no verdict is owed, and a retry's class no longer describes it.
        extra = {"pending_verdict": None, "failure_class": None}
    transition = apply_status(
        session,
        match.message_id,
        target,
        Source.WEBHOOK,
        now,
        provider_time=row.provider_time,
        cycle=match.cycle,
        kind=target.value,
        detail={
            "provider": row.provider,
            "provider_message_id": row.provider_message_id,
            "status": row.status,
            "errors": errors,
        },
        dedupe_key=row.dedupe_key,
        extra_values=extra,
    )
    if transition.duplicate:
        result = Result.DUPLICATE
    elif transition.applied:
        result = Result.APPLIED
    else:
        result = Result.REFUSED
        if transition.refusal is not None and transition.refusal.value == "late":
            log.info(
                "late %s for message %s (now %s): recorded, not applied",
                target.value,
                match.message_id,
                transition.from_status,
            )
    finish_status(session, status_id, now, result, match.message_id)
    return result


def _match(session: Session, row: WebhookStatus, now: datetime) -> tuple[_Match | None, int | None]:
    """(a match to apply, or None; the message id when the status is stale)."""
    by_id = session.execute(
        select(Message.id, Message.cycle)
        .where(
            Message.identity_id == row.identity_id,
            Message.provider_message_id == row.provider_message_id,
        )
        .with_for_update()
    ).first()
    if by_id is not None:
        return _Match(by_id.id, by_id.cycle), None

    parsed = parse_correlation_id(session, row.correlation_id)
    if parsed is not None:
        message_id, cycle = parsed
        # Locks the row: a worker recording the provider id right now finishes first.
        message = session.execute(
            select(Message.id, Message.cycle, Message.attempt, Message.provider_message_id)
            .where(Message.id == message_id, Message.identity_id == row.identity_id)
            .with_for_update()
        ).first()
        if message is not None and cycle == message.cycle and message.attempt == 0:
            # No attempt in this cycle: nothing of ours can be at the provider, so no
            # provider can report on it (`queued` is below anything it may say). Parked:
            # if an attempt later records this provider id, the status applies then.
            return None, None
        if message is not None and cycle == message.cycle:
            _adopt(session, message_id, cycle, message.provider_message_id, row, now)
            return _Match(message_id, cycle), None
        if message is not None and cycle < message.cycle:
            _record_stale(session, message_id, cycle, row, now)
            return None, message_id

    # A provider id only an attempt knows: an earlier cycle's (recorded, not applied), or
    # this cycle's from an attempt whose lease was lost before it recorded the id.
    earlier = session.execute(
        select(
            Attempt.message_id,
            Attempt.cycle,
            Message.cycle.label("current"),
            Message.provider_message_id,
        )
        .join(Message, Message.id == Attempt.message_id)
        .where(
            Attempt.provider_message_id == row.provider_message_id,
            Message.identity_id == row.identity_id,
        )
        .order_by(Attempt.cycle.desc())
        .with_for_update(of=Message)
    ).first()
    if earlier is not None and earlier.cycle < earlier.current:
        _record_stale(session, earlier.message_id, earlier.cycle, row, now)
        return None, earlier.message_id
    if earlier is not None:
        _adopt(session, earlier.message_id, earlier.cycle, earlier.provider_message_id, row, now)
        return _Match(earlier.message_id, earlier.cycle), None
    return None, None


def _adopt(
    session: Session,
    message_id: int,
    cycle: int,
    known_id: str | None,
    row: WebhookStatus,
    now: datetime,
) -> None:
    """This cycle's status names a provider id: record it if none is known yet; a second,
    different id for the same cycle means the provider holds the message twice."""
    if known_id is None:
        session.execute(
            update(Message)
            .where(
                Message.id == message_id,
                Message.cycle == cycle,
                Message.provider_message_id.is_(None),
            )
            .values(provider_message_id=row.provider_message_id)
        )
    elif known_id != row.provider_message_id:
        record_double_send(session, message_id, cycle, known_id, row.provider_message_id, now)


def _record_stale(
    session: Session, message_id: int, cycle: int, row: WebhookStatus, now: datetime
) -> None:
    target = PROVIDER_WORDS.get(row.status)
    if target is None:
        return
    apply_status(
        session,
        message_id,
        target,
        Source.WEBHOOK,
        now,
        provider_time=row.provider_time,
        cycle=cycle,
        dedupe_key=row.dedupe_key,
        detail={
            "provider_message_id": row.provider_message_id,
            "status": row.status,
            "why": "the provider id belongs to an earlier cycle",
        },
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


def apply_parked(
    session: Session, identity_id: int, provider_message_id: str, now: datetime
) -> list[str]:
    """Apply the statuses that arrived before the provider id was recorded.

    Called in the transaction that records the id, so the two cannot miss each other.
    """
    return [
        apply_webhook_status(session, status_id, now)
        for status_id in parked_status_ids(session, identity_id, provider_message_id)
    ]
