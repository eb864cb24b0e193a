"""The 24-hour customer-service window each inbound message opens or extends."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.models import ConversationWindow
from app.repo.sql import insert_ignoring_conflict

WINDOW = timedelta(hours=24)


def is_window_open(session: Session, identity_id: int, recipient: str, now: datetime) -> bool:
    open_until = session.scalar(
        select(ConversationWindow.open_until).where(
            ConversationWindow.identity_id == identity_id,
            ConversationWindow.recipient == recipient,
        )
    )
    return open_until is not None and open_until > now


def open_window(session: Session, identity_id: int, recipient: str, inbound_at: datetime) -> None:
    """Open or extend the window to `inbound_at` + 24 h; an older message never shortens it."""
    values = {
        "identity_id": identity_id,
        "recipient": recipient,
        "last_inbound_at": inbound_at,
        "open_until": inbound_at + WINDOW,
    }
    created = insert_ignoring_conflict(
        session, ConversationWindow.__table__, values, ["identity_id", "recipient"]
    )
    if created is None:
        session.execute(
            update(ConversationWindow)
            .where(
                ConversationWindow.identity_id == identity_id,
                ConversationWindow.recipient == recipient,
                ConversationWindow.last_inbound_at < inbound_at,
            )
            .values(last_inbound_at=inbound_at, open_until=inbound_at + WINDOW)
        )
