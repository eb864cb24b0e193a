"""Finding a message from what a customer, a ticket or the dashboard gives: its id (`#12`
or `12`), the provider's id, the caller's idempotency key (whole or its beginning), a
campaign label, a template's name, or the recipient's number: its first digits, or its last
four or more (the dashboard shows numbers as their last four). Always within the searcher's
tenant scope. `0010` is digits, not message 10 (`#10` or `10` is the id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, select, union
from sqlalchemy.orm import Session

from app.models import Attempt, Identity, Message

LIMIT = 50
MIN_DIGITS = 4
MIN_KEY_PREFIX = 3
TAIL = 4  # the stored tail's length (`messages.recipient_tail`)


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
    matched: str
    campaign: str | None = None
    template_name: str | None = None  # what it matched on, for the results page


def normalise_digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def search_messages(session: Session, text: str, tenant_id: int | None) -> list[Hit]:
    text = text.strip()
    if not text:
        return []
    conditions: list[tuple[str, ColumnElement[bool]]] = []
    number = _message_number(text)
    if number is not None:
        conditions.append(("message id", Message.id == number))
    conditions.append(("provider id", Message.provider_message_id == text))
    # An attempt's provider id: joined, so it is looked up in the attempts' index.
    attempt_arm = (
        select(Message.id)
        .join(Attempt, Attempt.message_id == Message.id)
        .where(Attempt.provider_message_id == text)
    )
    conditions.append(("idempotency key", Message.idempotency_key == text))
    if len(text) >= MIN_KEY_PREFIX:
        prefix = Message.idempotency_key.startswith(text, autoescape=True)
        conditions.append(("key prefix", prefix))
    conditions.append(("campaign", Message.campaign == text[:100]))
    conditions.append(("template", Message.template_name == text[:512]))
    digits = normalise_digits(text)
    if len(digits) >= MIN_DIGITS and re.fullmatch(r"[\d\s+().…-]+", text):
        conditions.append(("recipient", Message.recipient.startswith(digits, autoescape=True)))
        ending = Message.recipient_tail == digits[-TAIL:]
        if len(digits) > TAIL:
            ending = and_(ending, Message.recipient.endswith(digits, autoescape=True))
        conditions.append(("recipient's last digits", ending))
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
                matched=_matched(message, text, digits, number),
                campaign=message.campaign,
                template_name=message.template_name,
            )
        )
    return hits


def _message_number(text: str) -> int | None:
    """`#12` or `12` is message 12; `0012` is not (it is a number's digits)."""
    bare = text[1:] if text.startswith("#") else text
    if (
        bare.isascii()
        and bare.isdigit()
        and len(bare) <= 18
        and (text.startswith("#") or not bare.startswith("0"))
    ):
        return int(bare)
    return None


def _matched(message: Message, text: str, digits: str, number: int | None) -> str:
    if message.id == number:
        return "message id"
    if message.provider_message_id == text:
        return "provider id"
    if message.idempotency_key == text:
        return "idempotency key"
    if message.campaign and message.campaign == text:
        return "campaign"
    if message.template_name and message.template_name == text:
        return "template"
    if message.idempotency_key and message.idempotency_key.startswith(text):
        return "key prefix"
    if len(digits) >= MIN_DIGITS and message.recipient.startswith(digits):
        return "recipient"
    if len(digits) >= MIN_DIGITS and message.recipient.endswith(digits):
        return "recipient's last digits"
    return "provider id of an earlier attempt"
