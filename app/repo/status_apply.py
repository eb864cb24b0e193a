"""One stored status applied to its message, in the caller's session: the reconciler's
steps in order (the map is in `app/reconcile.py`, which owns the transactions around them).

    apply_stored_status
      1. match, 2. adopt  `app/repo/status_match.py`: the message locked, this cycle's
                          provider id adopted (two ids: a double send), or stale
      3. claim            the status row, so two appliers cannot both apply it
      4. park             no message yet (or none with an attempt in that cycle)
      5. apply            through the guard: `apply_status`, which asks `app/lifecycle.py`
      6. record           the status row's result
    apply_matched_by_provider_id
                          1a, 3, 5 and 6 in one statement on PostgreSQL
    apply_webhook_status  one stored status by its id (the sweeper's replay)
    apply_parked          the worker recording a provider id applies what arrived before it

Lock order, everywhere: the message row first, then the status row (see `app/reconcile.py`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from app.late_statuses import note_refusal
from app.lifecycle import ACCEPTED_WORDS, PROVIDER_WORDS, Source, Status
from app.providers.dead_letter_order import rank_of
from app.repo.inbox import (
    Result,
    StatusTakenError,
    StoredStatus,
    claim_and_finish_status,
    claim_status,
    finish_status,
    load_status,
    parked_status_ids,
)
from app.repo.status_match import Match, Stale, match
from app.repo.transitions import Transition, apply_status
from app.repo.webhook_sql_apply import apply_by_provider_id


def apply_stored_status(
    session: Session, status: StoredStatus, now: datetime, *, own_transaction: bool = False
) -> str:
    """Match one stored status to its message and apply it; returns a `Result` word.

    With `own_transaction` (the transaction holds nothing but this status, and the caller
    rolls it back on `StatusTakenError`), the claim (3) rides on the record (6) as one
    compare-and-set; otherwise (the worker applying parked statuses inside its own work,
    the sweeper) the status row is claimed first, so nothing is done twice.
    """

    def record(applied_at: datetime | None, result: str, message_id: int | None) -> str:
        if not own_transaction:
            finish_status(session, status.id, applied_at, result, message_id)
        elif not claim_and_finish_status(session, status.id, applied_at, result, message_id):
            raise StatusTakenError(status.id)
        return result

    if status.identity_id is None:
        # A number we do not know: nothing of ours can match it (stored finished already;
        # this covers a row from before they were).
        if own_transaction or claim_status(session, status.id):
            return record(now, Result.UNMATCHED, None)
        return Result.UNMATCHED

    found = match(session, status, now)  # 1 and 2: locks the message, adopts the id
    if not own_transaction and not claim_status(session, status.id):  # 3
        return Result.DUPLICATE
    if found is None:  # 4: parked, for the worker or the sweeper to apply later
        return record(None, Result.PARKED, None)
    if isinstance(found, Stale):
        return record(now, Result.STALE, found.message_id)
    target = PROVIDER_WORDS.get(status.status)
    if (
        target is None
        and status.status in ACCEPTED_WORDS
        and found.message.status is Status.SENDING
    ):
        # Twilio has the message (its answer to us was lost or is late): our `sent`, so
        # no retry sends a second copy.
        target = Status.SENT
    if target is None:  # below `sent` (Twilio's queued, ...) or untracked: recorded only
        return record(now, Result.IGNORED, found.message.id)
    transition = apply_through_guard(session, status, found, target, now)  # 5
    note_refusal(transition, found.message.id, status.provider)
    return record(now, result_of(transition), found.message.id)  # 6


def one_statement_applies(status: StoredStatus) -> bool:
    """The status moves a message and names a provider id of a known identity."""
    return (
        status.status in PROVIDER_WORDS
        and status.identity_id is not None
        and status.provider_message_id is not None
    )


def apply_matched_by_provider_id(
    session: Session | Connection, status: StoredStatus, now: datetime
) -> str | None:
    """Steps 1a, 3, 5 and 6 in one statement on PostgreSQL, for a status (in a transaction
    of its own, or as one) for which `one_statement_applies`: None (nothing done) when no
    message of its identity has the id, and the caller goes step by step. Raises
    `StatusTakenError` as `record` does, with everything the statement did undone."""
    target = PROVIDER_WORDS[status.status]
    detail, extra = guard_values(status, target)
    done = apply_by_provider_id(session, status, target, now, detail=detail, extra_values=extra)
    if done is None:
        return None
    transition = Transition(
        done.applied, done.from_status, target, done.refusal, duplicate=done.duplicate
    )
    note_refusal(transition, done.message_id, status.provider)
    return result_of(transition)


# 5. Apply through the guard ---------------------------------------------------------


def apply_through_guard(
    session: Session, status: StoredStatus, found: Match, target: Status, now: datetime
) -> Transition:
    """One compare-and-set through the state machine, deduplicated by the status's key
    (the same provider, provider id and status seen again adds no event)."""
    detail, extra = guard_values(status, target)
    return apply_status(
        session,
        found.message.id,
        target,
        Source.WEBHOOK,
        now,
        provider_time=status.provider_time,
        cycle=found.cycle,
        kind=target.value,
        detail=detail,
        dedupe_key=status.dedupe_key,
        extra_values=extra,
        known=found.message.state,
    )


def guard_values(status: StoredStatus, target: Status) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the event's detail, the columns an applied move also writes) for a status."""
    payload = status.payload or {}
    errors = payload.get("errors") or []
    if target is Status.FAILED:
        no_reason = {"provider": status.provider, "message": "failed, no reason given"}
        last_error = errors[0] if errors else no_reason
        failure_class = payload.get("failure_class") or "needs_human"
        extra: dict[str, Any] = {
            "last_error": last_error,
            "failure_class": failure_class,
            "dead_letter_rank": rank_of(status.provider, failure_class, last_error.get("code")),
            "next_attempt_at": None,
            "pending_verdict": None,
            # The lease stays: a retry may still be in flight, and a requeue must wait for it.
        }
    else:
        # The provider has it: no verdict is owed, and a retry's class no longer describes it.
        extra = {"pending_verdict": None, "failure_class": None}
    detail = {
        "provider": status.provider,
        "provider_message_id": status.provider_message_id,
        "status": status.status,
        "errors": errors,
    }
    return detail, extra


# 6. Record --------------------------------------------------------------------------


def result_of(transition: Transition) -> str:
    if transition.duplicate:
        return Result.DUPLICATE
    return Result.APPLIED if transition.applied else Result.REFUSED


def apply_webhook_status(session: Session, status_id: int, now: datetime) -> str:
    """Apply one stored status by its id (the sweeper's replay, the parked statuses)."""
    status = load_status(session, status_id)
    if status is None:
        return Result.DUPLICATE  # gone, or finished by another applier
    return apply_stored_status(session, status, now)


# The worker's side: statuses that beat the send response ----------------------------


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
