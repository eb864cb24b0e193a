"""A message's whole story for its page: the row, its identity, every event (refused ones
too), every attempt with its verbatim answer, every webhook status that named it, the
recipient's 24-hour window and the audit rows about it. Scoped: another tenant's message
is simply not found."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import (
    Attempt,
    AuditEntry,
    ConversationWindow,
    Identity,
    Message,
    MessageEvent,
    Tenant,
    WebhookDelivery,
    WebhookStatus,
)
from app.repo.requeues import provider_may_hold

# Why a refused event did not apply, in a support person's words.
REFUSALS = {
    "late": "ignored: a lower status after a higher one (a true fact about the past)",
    "same": "ignored: already in that state",
    "failed_is_final": "ignored: the message had already failed",
    "already_shown": "ignored: failed after the phone had shown it",
    "not_failed": "refused: only a failed message can be requeued",
    "claimed": "refused: a worker had claimed it, so it may be in flight; not canceled",
    "not_allowed": "refused: not a move this source can make",
    "stale": "ignored: it belongs to an earlier cycle or a taken-over attempt",
}


@dataclass(frozen=True, slots=True)
class WebhookSeen:
    status: WebhookStatus
    delivery_received_at: Any
    # The delivery's raw body, only when it came for this message's own identity.
    raw_body: str | None


@dataclass(frozen=True, slots=True)
class MessageStory:
    message: Message
    identity: Identity
    tenant_name: str
    events: list[MessageEvent]
    attempts: list[Attempt]
    webhooks: list[WebhookSeen]
    window: ConversationWindow | None
    audit: list[AuditEntry]
    held: str | None


def scoped_message(session: Session, message_id: int, tenant_id: int | None) -> Message | None:
    query = select(Message).where(Message.id == message_id)
    if tenant_id is not None:
        query = query.where(Message.tenant_id == tenant_id)
    return session.scalars(query.execution_options(populate_existing=True)).one_or_none()


def message_story(session: Session, message_id: int, tenant_id: int | None) -> MessageStory | None:
    message = scoped_message(session, message_id, tenant_id)
    if message is None:
        return None
    identity = session.get(Identity, message.identity_id)
    assert identity is not None
    tenant_name = session.scalar(select(Tenant.name).where(Tenant.id == message.tenant_id)) or ""
    events = list(
        session.scalars(
            select(MessageEvent)
            .where(MessageEvent.message_id == message_id)
            .order_by(MessageEvent.id)
        )
    )
    attempts = list(
        session.scalars(
            select(Attempt)
            .where(Attempt.message_id == message_id)
            .order_by(Attempt.cycle, Attempt.number)
        )
    )
    webhooks = [
        WebhookSeen(
            status,
            received_at,
            body if delivery_identity == message.identity_id else None,
        )
        for status, received_at, body, delivery_identity in session.execute(
            select(
                WebhookStatus,
                WebhookDelivery.received_at,
                WebhookDelivery.body,
                WebhookDelivery.identity_id,
            )
            .join(WebhookDelivery, WebhookDelivery.id == WebhookStatus.delivery_id)
            .where(
                WebhookStatus.message_id == message_id,
                WebhookStatus.identity_id == message.identity_id,
            )
            .order_by(WebhookStatus.received_at, WebhookStatus.id)
        )
    ]
    window = session.scalars(
        select(ConversationWindow).where(
            ConversationWindow.identity_id == message.identity_id,
            ConversationWindow.recipient == message.recipient,
        )
    ).one_or_none()
    audit = list(
        session.scalars(
            select(AuditEntry)
            .where(AuditEntry.target == f"message:{message_id}")
            .order_by(AuditEntry.id)
        )
    )
    held = provider_may_hold(session, message) if message.status == "failed" else None
    return MessageStory(
        message, identity, tenant_name, events, attempts, webhooks, window, audit, held
    )
