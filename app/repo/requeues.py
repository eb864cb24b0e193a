"""A requeue asked for from the dashboard, in one transaction the caller owns:

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

from app.models import Message
from app.repo.messages import RequeueRefusedError, requeue_message
from app.repo.staff import record_audit


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
