"""The requeue, the one backward edge: `requeue_message` is the rule (the CLI and the
dashboard both go through it), and `provider_may_hold` the question it asks first.

A requeue asked for from the dashboard (`requeue_from_dashboard`), in one transaction the
caller owns:

1. Lock the message row within the staff member's tenant scope (another tenant's message
   is not found, exactly as if it did not exist).
2. Compare the cycle the page showed with the row's: a page loaded before the message was
   requeued and failed again must not requeue it a second time on a stale picture.
3. `requeue_message` checks the rule (failed, no attempt in flight, the provider may not
   hold a deliverable copy unless forced with a reason) on the same locked row.
4. Record the audit row, with the tenant, in the same transaction.

The caller rings the message after the commit (`jobs.drain.ring_message`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.lifecycle import TIMESTAMP_FIELD, Source, Status
from app.models import Message
from app.repo.messages import correlation_id_for, get_message
from app.repo.staff import record_audit
from app.repo.transitions import apply_status
from app.shards import shard_key_of


class RequeueRefusedError(Exception):
    """A requeue that must not happen (not failed, or the provider may hold the message)."""


def requeue_message(
    session: Session,
    message_id: int,
    now: datetime,
    *,
    actor: str,
    force: bool = False,
    reason: str | None = None,
) -> Message:
    """The one backward edge: an operator moves a failed message to `queued`, a new cycle.

    1. Lock the row. The check and the update below then see the same row: a webhook
       that could change the verdict locks it to match its status, so it either
       committed before us (and we see it) or waits for our commit.
    2. Refuse, unless forced with a reason, when the provider may hold a deliverable copy
       (`provider_may_hold`); the refusal names what it found.
    3. If any attempt of the failed cycle had an unknown outcome the provider may hold
       the message, so the new cycle keeps the provider key; after only definite
       rejections it gets the new cycle's key.
    """
    message = session.scalars(
        select(Message)
        .where(Message.id == message_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
    if message is None:
        raise RequeueRefusedError(f"message {message_id} does not exist")
    if message.status != Status.FAILED.value:
        raise RequeueRefusedError(
            f"message {message_id} is {message.status}, not failed; only failed messages "
            "can be requeued"
        )
    if message.lease_until is not None and message.lease_until > now:
        raise RequeueRefusedError(
            f"message {message_id} has an attempt still in flight until "
            f"{message.lease_until:%H:%M:%S} UTC; requeue it after that"
        )
    if message.content_purged_at is not None:
        raise RequeueRefusedError(
            f"message {message_id}'s content was purged on {message.content_purged_at:%Y-%m-%d} "
            "(retention): there is nothing to send; send it again as a new message"
        )
    if force and not reason:
        raise RequeueRefusedError("a forced requeue needs a reason")
    held = provider_may_hold(session, message)
    if held and not force:
        raise RequeueRefusedError(
            f"message {message_id} may already be with the customer: {held}. "
            "Requeueing could text them twice; use --force with --reason to requeue anyway"
        )
    new_cycle = message.cycle + 1
    # The key stays while the provider may hold a copy under it: an unknown outcome in the
    # failed cycle, or a cycle that made no attempt at all (canceled while queued), which
    # still carries the key of the cycle before it.
    keep_key = message.had_unknown_outcome or message.attempt == 0
    key_cycle = message.provider_key_cycle if keep_key else new_cycle
    cleared = {name: None for name in (*TIMESTAMP_FIELD.values(), "not_before", "expires_at")}
    result = apply_status(
        session,
        message_id,
        Status.QUEUED,
        Source.OPERATOR,
        now,
        cycle=message.cycle,
        kind="requeue",
        actor=actor,
        detail={
            "forced": force,
            "reason": reason,
            "held": held,
            "new_cycle": new_cycle,
            "provider_key_cycle": key_cycle,
            "previous_error": message.last_error,
            "previous_failure_class": message.failure_class,
        },
        extra_values={
            **cleared,
            "queued_at": now,
            "cycle": new_cycle,
            "provider_key_cycle": key_cycle,
            # A row older than its shard key (migration 0022 left finished rows at 0) joins
            # its recipient's shard again.
            "shard_key": shard_key_of(message.recipient),
            "correlation_id": correlation_id_for(session, message_id, new_cycle),
            "provider_message_id": None,
            "attempt": 0,
            "unknown_attempts": 0,
            "rate_limited_attempts": 0,
            "had_unknown_outcome": False,
            "request_started_ms": None,
            "next_attempt_at": None,
            "lease_until": None,
            "rung_at": None,
            "failure_class": None,
            "dead_letter_rank": None,
            "pending_verdict": None,
            "last_error": None,
        },
    )
    if not result.applied:
        raise RequeueRefusedError(f"message {message_id} changed while requeueing; try again")
    refreshed = get_message(session, message_id)
    assert refreshed is not None
    return refreshed


def provider_may_hold(session: Session, message: Message) -> str | None:
    """Why the provider may hold a deliverable copy of this message, or None.

    Looked for across every cycle, since a copy an earlier cycle lost track of is just as
    deliverable: a `delivered` or `read` reported for it (applied, refused because it had
    failed, or recorded late for an earlier cycle), or a provider id it was accepted under
    that was never reported `failed` on its own (the second id of a double send is the
    usual case). A copy the provider accepted and then failed (131049, say) is not held.
    """
    from app.repo.holds import holds_for  # the same rule for many messages at once

    return holds_for(session, [message])[message.id]


class MessageNotFoundError(LookupError):
    """No such message within the scope (the view answers 404)."""


@dataclass(frozen=True, slots=True)
class RequeueOutcome:
    requeued: bool
    message_id: int
    lane: str
    identity_id: int
    cycle: int
    same_key: bool = False
    refusal: str | None = None
    stale: bool = False


def requeue_from_dashboard(
    session: Session,
    message_id: int,
    tenant_id: int | None,
    shown_cycle: int,
    now: datetime,
    *,
    actor: str,
    force: bool = False,
    reason: str | None = None,
) -> RequeueOutcome:
    query = select(Message).where(Message.id == message_id)
    if tenant_id is not None:
        query = query.where(Message.tenant_id == tenant_id)
    message = session.scalars(
        query.with_for_update().execution_options(populate_existing=True)
    ).one_or_none()
    if message is None:
        raise MessageNotFoundError(message_id)
    if message.cycle != shown_cycle:
        return RequeueOutcome(
            False,
            message.id,
            message.lane,
            message.identity_id,
            message.cycle,
            refusal=f"changed since you loaded it (now cycle {message.cycle}, {message.status})",
            stale=True,
        )
    try:
        requeued = requeue_message(
            session, message_id, now, actor=actor, force=force, reason=reason or None
        )
    except RequeueRefusedError as exc:
        return RequeueOutcome(
            False, message.id, message.lane, message.identity_id, message.cycle, refusal=str(exc)
        )
    same_key = requeued.provider_key_cycle != requeued.cycle
    record_audit(
        session,
        actor,
        "message.requeue",
        f"message:{message_id}",
        now,
        {
            "forced": force,
            "reason": reason or None,
            "cycle": requeued.cycle,
            "same_key": same_key,
            "via": "dashboard",
        },
        tenant_id=requeued.tenant_id,
    )
    return RequeueOutcome(
        True, requeued.id, requeued.lane, requeued.identity_id, requeued.cycle, same_key=same_key
    )
