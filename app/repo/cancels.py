"""Cancel a queued message, and dismiss a dead letter a person has dealt with.

A cancel is one compare-and-set from `queued` to `failed` (class `canceled`), fenced on the
cycle the caller saw. A worker's claim is the same kind of write on the same row
(`WHERE status = 'queued'`, or a `SELECT ... FOR NO KEY UPDATE SKIP LOCKED` that re-checks
the row once it holds it), so of a cancel and a claim racing each other exactly one wins: the
message is either canceled and never sent, or claimed and not canceled.

A dismissal takes a failed message out of the actionable list (its `dead_letter_rank` is
cleared, which is what the list reads) and leaves it searchable; the audit row says who,
when and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import Identity, Message
from app.providers.base import FailureClass
from app.providers.dead_letter_order import rank_of
from app.repo.sql import keyed, rows_changed
from app.repo.staff import record_audit
from app.repo.transitions import apply_status

CANCELED = FailureClass.CANCELED.value


class MessageNotFoundError(LookupError):
    """No such message within the scope."""


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    canceled: bool
    message_id: int
    status: str  # the message's status after the attempt
    cycle: int
    # Why not, in a support person's words (None when canceled).
    why_not: str | None = None
    # A worker claimed it first: it may be in flight.
    claimed: bool = False


def _scoped(session: Session, message_id: int, tenant_id: int | None) -> Message:
    query = select(Message).where(Message.id == message_id)
    if tenant_id is not None:
        query = query.where(Message.tenant_id == tenant_id)
    message = session.scalars(query.execution_options(populate_existing=True)).one_or_none()
    if message is None:
        raise MessageNotFoundError(message_id)
    return message


def why_not_canceled(status: str, cycle: int, expected_cycle: int | None) -> tuple[str, bool]:
    """(the words, whether a worker claimed it) for a message that was not canceled."""
    if expected_cycle is not None and cycle != expected_cycle:
        return f"changed since it was shown (now cycle {cycle}, {status})", False
    if status == Status.SENDING.value:
        return "already claimed by a worker: it may be in flight, so it was not canceled", True
    if status in (Status.SENT.value, Status.DELIVERED.value, Status.READ.value):
        return f"already {status}: the provider has it", True
    if status == Status.FAILED.value:
        return "it has already failed (or was canceled): nothing to cancel", False
    return f"it is {status}", False


def cancel_message(
    session: Session,
    message_id: int,
    now: datetime,
    *,
    actor: str,
    reason: str,
    tenant_id: int | None = None,
    expected_cycle: int | None = None,
    audit: bool = True,
    via: str = "dashboard",
) -> CancelOutcome:
    """Cancel one message if it is still queued (in `expected_cycle`, if given).

    1. Read it within the tenant scope (another tenant's message is not found).
    2. `apply_status` moves it `queued -> failed` as one compare-and-set on the status and
       cycle; a worker's claim committed first makes it refuse (`claimed`), recorded.
    3. With `audit`, one audit row in the same transaction (a bulk cancel writes one row
       for the whole plan instead).
    """
    if not reason.strip():
        raise ValueError("a cancel needs a reason")
    message = _scoped(session, message_id, tenant_id)
    if expected_cycle is not None and message.cycle != expected_cycle:
        words, claimed = why_not_canceled(message.status, message.cycle, expected_cycle)
        return CancelOutcome(False, message_id, message.status, message.cycle, words, claimed)
    result = apply_status(
        session,
        message_id,
        Status.FAILED,
        Source.OPERATOR,
        now,
        cycle=message.cycle,
        kind="cancel",
        actor=actor,
        detail={"reason": reason, "via": via},
        extra_values={
            "failure_class": CANCELED,
            # Not a dead letter: a person chose this. Still found by search.
            "dead_letter_rank": None,
            "next_attempt_at": None,
            "lease_until": None,
            "last_error": {
                "provider": "ratchet",
                "code": None,
                "title": "Canceled before it was sent",
                "message": reason,
            },
        },
    )
    after = _scoped(session, message_id, tenant_id)
    if audit:
        record_audit(
            session,
            actor,
            "message.cancel" if result.applied else "message.cancel_refused",
            f"message:{message_id}",
            now,
            {"reason": reason, "via": via, "canceled": result.applied, "status": after.status},
            tenant_id=after.tenant_id,
        )
    if result.applied:
        return CancelOutcome(True, message_id, after.status, after.cycle)
    words, claimed = why_not_canceled(after.status, after.cycle, None)
    return CancelOutcome(False, message_id, after.status, after.cycle, words, claimed)


@dataclass(frozen=True, slots=True)
class DismissOutcome:
    dismissed: bool
    message_id: int
    why_not: str | None = None


def dismiss_message(
    session: Session,
    message_id: int,
    now: datetime,
    *,
    actor: str,
    reason: str | None,
    tenant_id: int | None,
    expected_cycle: int,
) -> DismissOutcome:
    """Take a dead letter off the actionable list (a compare-and-set on its failed cycle)."""
    message = _scoped(session, message_id, tenant_id)
    changed = rows_changed(
        session,
        update(Message)
        .where(
            Message.id == message_id,
            keyed(Message.status == Status.FAILED.value),
            Message.cycle == expected_cycle,
            keyed(Message.dead_letter_rank.is_not(None)),
        )
        .values(dead_letter_rank=None)
        .execution_options(synchronize_session=False),
    )
    if changed != 1:
        fresh = _scoped(session, message_id, tenant_id)
        if fresh.cycle != expected_cycle or fresh.status != Status.FAILED.value:
            why = f"changed since it was shown (now cycle {fresh.cycle}, {fresh.status})"
        else:
            why = "already off the list (dismissed or canceled)"
        return DismissOutcome(False, message_id, why)
    record_audit(
        session,
        actor,
        "message.dismiss",
        f"message:{message_id}",
        now,
        {
            "reason": reason,
            "via": "web",
            "cycle": expected_cycle,
            "failure_class": message.failure_class,
            "code": (message.last_error or {}).get("code"),
        },
        tenant_id=message.tenant_id,
    )
    return DismissOutcome(True, message_id)


def undismiss_message(
    session: Session,
    message_id: int,
    now: datetime,
    *,
    actor: str,
    tenant_id: int | None,
    expected_cycle: int,
) -> DismissOutcome:
    """Put a dismissed dead letter back on the actionable list, ranked as when it failed
    (a compare-and-set on its failed cycle; a canceled message stays canceled)."""
    message = _scoped(session, message_id, tenant_id)
    provider = session.scalar(select(Identity.provider).where(Identity.id == message.identity_id))
    rank = rank_of(provider or "", message.failure_class, (message.last_error or {}).get("code"))
    changed = rows_changed(
        session,
        update(Message)
        .where(
            Message.id == message_id,
            keyed(Message.status == Status.FAILED.value),
            Message.cycle == expected_cycle,
            keyed(Message.dead_letter_rank.is_(None)),
            Message.failure_class != CANCELED,
        )
        .values(dead_letter_rank=rank)
        .execution_options(synchronize_session=False),
    )
    if changed != 1:
        return DismissOutcome(False, message_id, "changed since it was shown, or canceled")
    record_audit(
        session,
        actor,
        "message.undismiss",
        f"message:{message_id}",
        now,
        {"via": "web", "cycle": expected_cycle},
        tenant_id=message.tenant_id,
    )
    return DismissOutcome(True, message_id)
