"""How far a run's messages got: how many finished (`finished`), and our correlation id in a
send the sandbox accepted (`correlation_of`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from sqlalchemy import func, select

from app.models import Message

from .conftest import Env


def correlation_of(provider: str, accepted: dict) -> str | None:
    """Our correlation id in an accepted send: WhatsApp's biz_opaque_callback_data, or the
    `c` of Twilio's StatusCallback URL."""
    if provider == "twilio":
        callback = accepted["form"].get("StatusCallback", "")
        return dict(parse_qsl(urlsplit(callback).query)).get("c")
    return accepted["body"].get("biz_opaque_callback_data")


def finished(env: Env, ids: list[int]) -> int:
    """Messages that reached a terminal or advanced state."""
    with env.db.transaction() as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(Message)
                .where(
                    Message.id.in_(ids), Message.status.in_(["sent", "delivered", "read", "failed"])
                )
            )
            or 0
        )
