"""Finding a message from what a customer or a ticket gives: its id, the provider's id,
the caller's idempotency key, or the recipient's number (a prefix of its digits).
Always within the searcher's tenant scope."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, select, union
from sqlalchemy.orm import Session

from app.models import Attempt, Identity, Message

LIMIT = 50
MIN_DIGITS = 4


@dataclass(frozen=True, slots=True)
class Hit:
    id: int
    tenant_id: int
    status: str
    recipient: str
    lane: str
    provider: str
    account_id: str
    created_at: datetime
    matched: str  # what it matched on, for the results page


def normalise_digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def search_messages(session: Session, text: str, tenant_id: int | None) -> list[Hit]:
    text = text.strip()
    if not text:
        return []
    conditions: list[tuple[str, ColumnElement[bool]]] = []
    if text.isascii() and text.isdigit() and len(text) <= 18:
        conditions.append(("message id", Message.id == int(text)))
    conditions.append(("provider id", Message.provider_message_id == text))
    # An attempt's provider id: joined, so it is looked up in the attempts' index.
    attempt_arm = (
        select(Message.id)
        .join(Attempt, Attempt.message_id == Message.id)
        .where(Attempt.provider_message_id == text)
    )
    conditions.append(("idempotency key", Message.idempotency_key == text))
    digits = normalise_digits(text)
    if len(digits) >= MIN_DIGITS and re.fullmatch(r"[\d\s+().-]+", text):
        conditions.append(("recipient", Message.recipient.startswith(digits, autoescape=True)))
    # One indexed lookup per kind of match, each cut to the newest LIMIT ids, then one
    # read of those rows: an OR of them in one WHERE would walk the whole table.
    arms = []
    for arm in [select(Message.id).where(c) for _, c in conditions] + [attempt_arm]:
        if tenant_id is not None:
            arm = arm.where(Message.tenant_id == tenant_id)
        arms.append(arm.order_by(Message.id.desc()).limit(LIMIT).subquery().select())
    ids = union(*arms).subquery()
    query = (
        select(Message, Identity.provider, Identity.account_id)
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.id.in_(select(ids.c.id)))
        .order_by(Message.id.desc())
        .limit(LIMIT)
    )
    hits = []
    for message, provider, account_id in session.execute(query):
        hits.append(
            Hit(
                id=message.id,
                tenant_id=message.tenant_id,
                status=message.status,
                recipient=message.recipient,
                lane=message.lane,
                provider=provider,
                account_id=account_id,
                created_at=message.created_at,
                matched=_matched(message, text, digits),
            )
        )
    return hits


def _matched(message: Message, text: str, digits: str) -> str:
    if text.isascii() and text.isdigit() and len(text) <= 18 and message.id == int(text):
        return "message id"
    if message.provider_message_id == text:
        return "provider id"
    if message.idempotency_key == text:
        return "idempotency key"
    if digits and message.recipient.startswith(digits):
        return "recipient"
    return "provider id of an earlier attempt"
