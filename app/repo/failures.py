"""An attempt that failed, recorded under its fence: a retry later (`record_retry`), a
failure now (`record_failed`), or the verdict a message owes once its grace wait is over
(`take_verdict`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import Identity, Message
from app.providers.dead_letter_order import rank_of
from app.repo.attempts import fenced
from app.repo.claims import Claim
from app.repo.sql import keyed, rows_changed
from app.repo.transitions import Transition, apply_status


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
            .where(*fenced(claim), keyed(Message.status == Status.SENDING.value))
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
