"""Revealing what the dashboard masks: a recipient's full number, for an operator, with an
audit row saying who looked at which message's number and when."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from app.repo.staff import record_audit
from app.repo.timeline import scoped_message


def reveal_recipient(
    session: Session, message_id: int, tenant_id: int | None, actor: str, now: datetime
) -> str | None:
    """The message's full recipient, audited; None if the scope has no such message."""
    message = scoped_message(session, message_id, tenant_id)
    if message is None:
        return None
    record_audit(
        session,
        actor,
        "message.reveal_recipient",
        f"message:{message_id}",
        now,
        {"via": "web"},
        tenant_id=message.tenant_id,
    )
    return message.recipient
