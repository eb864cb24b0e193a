"""How far a run's messages got: how many finished (`finished`), our correlation id in a
send the sandbox accepted (`correlation_of`), and the checker's verdict on a whole run
(`verdict_of`: tests/chaos/checker.py).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy import func, select

from app.models import Message, MessageEvent

from ..chaos.checker import REACHED, Accepted, Acknowledged, Stored, Verdict, check
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


def verdict_of(
    env: Env, number: dict[str, Any], provider: str, acknowledged: list[Acknowledged]
) -> Verdict:
    """The checker's verdict on a run: the API's acknowledgements against the sends the
    sandbox accepted for `number` and the messages and applied changes in the database."""
    ids = [a.message_id for a in acknowledged]
    # The rows and their events in one snapshot: read at READ COMMITTED, a status applied
    # between the two reads (the last message's `delivered`, arriving as the run ends) showed
    # the row below its own event, and the checker called it a backward move.
    snapshot = env.db.engine.connect().execution_options(isolation_level="REPEATABLE READ")
    with snapshot as connection, connection.begin():
        messages = connection.execute(
            select(
                Message.id,
                Message.correlation_id,
                Message.status,
                Message.failure_class,
            ).where(Message.id.in_(ids))
        ).all()
        events = connection.execute(
            select(
                MessageEvent.message_id,
                MessageEvent.cycle,
                MessageEvent.from_status,
                MessageEvent.to_status,
                MessageEvent.received_at,
                MessageEvent.detail,
            )
            .where(MessageEvent.message_id.in_(ids), MessageEvent.applied.is_(True))
            .order_by(MessageEvent.id)
        ).all()
    by_correlation = {row.correlation_id: row.id for row in messages}
    changes: dict[int, list[tuple[int, str | None, str | None]]] = defaultdict(list)
    left_queue: dict[int, float] = {}
    held: set[int] = set()
    for event in events:
        changes[event.message_id].append((event.cycle, event.from_status, event.to_status))
        if event.to_status in REACHED | {"failed", "canceled"}:
            left_queue.setdefault(event.message_id, event.received_at.timestamp())
        if event.detail and event.detail.get("overtook"):
            held.add(event.message_id)
    accepted = [
        Accepted(by_correlation.get(correlation_of(provider, send)), send["to"], send["time"])
        for send in env.accepted(number)
    ]
    stored = [
        Stored(
            row.id,
            row.status,
            row.failure_class,
            left_queue.get(row.id),
            tuple(changes[row.id]),
            row.id in held,
        )
        for row in messages
    ]
    return check(acknowledged, accepted, stored)
