"""Questions about the queue as a whole: what is due and not rung, and the dead letters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Identity, Message
from app.providers.base import FailureClass
from app.repo.claimable import is_due


def due_drains(session: Session, now: datetime, limit: int = 10_000) -> list[tuple[int, str]]:
    """(identity, lane) pairs of active identities with something due now: what the
    sweeper rings. Ringing a drain that is already pending or running costs nothing."""
    return [
        (row.identity_id, row.lane)
        for row in session.execute(
            select(Message.identity_id, Message.lane)
            .join(Identity, Identity.id == Message.identity_id)
            .where(
                is_due(now),
                Identity.paused_at.is_(None),
                # A paused campaign lane is not rung; its reply lane is.
                or_(Message.lane != "campaign", Identity.campaign_paused_at.is_(None)),
            )
            .group_by(Message.identity_id, Message.lane)
            .order_by(Message.identity_id, Message.lane)
            .limit(limit)
        )
    ]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    message_id: int
    tenant_id: int
    identity_id: int
    provider: str
    recipient: str
    failure_class: str
    code: int | None
    title: str | None
    error: dict[str, Any] | None
    failed_at: datetime | None
    cycle: int


def dead_letters(
    session: Session,
    *,
    failure_class: str | None = None,
    tenant_id: int | None = None,
    limit: int = 500,
) -> list[DeadLetter]:
    """Every failed message with its class, the ones a person can act on first.

    Order: exhausted, template problems, window closed, unknown codes, then the rest;
    newest first within each. Messages held by a paused identity are not here: they wait.
    Expired ones have no rank (off this list by default) and are listed by their class.
    """
    # The rank is stored with the failure, so SQL orders (and a LIMIT cuts) actionable
    # first: sorting after the LIMIT would drop older exhausted letters behind newer ones.
    query = (
        select(Message, Identity.provider)
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.status == Status.FAILED.value)
        .order_by(
            Message.dead_letter_rank.asc().nulls_last(),
            Message.failed_at.desc(),
            Message.id.desc(),
        )
        .limit(limit)
    )
    if failure_class is not None:
        query = query.where(Message.failure_class == failure_class)
    if failure_class != FailureClass.EXPIRED.value:
        # Dismissed, canceled and expired ones have no rank: off the actionable list.
        query = query.where(Message.dead_letter_rank.is_not(None))
    if tenant_id is not None:
        query = query.where(Message.tenant_id == tenant_id)
    letters = []
    for message, provider in session.execute(query):
        error = message.last_error or {}
        letters.append(
            DeadLetter(
                message_id=message.id,
                tenant_id=message.tenant_id,
                identity_id=message.identity_id,
                provider=provider,
                recipient=message.recipient,
                failure_class=message.failure_class or "unknown",
                code=error.get("code"),
                title=error.get("title") or error.get("message"),
                error=message.last_error,
                failed_at=message.failed_at,
                cycle=message.cycle,
            )
        )
    return letters
