"""What an acceptance wrote, read back for comparing two paths (`written`), and the SQL a
block of code sent (`counted`): shared by the acceptance tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, select

from app.db import Database
from app.models import Attempt, Message, MessageEvent


@contextmanager
def counted(db: Database) -> Iterator[list[str]]:
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        # The test's outer transaction turns each of ours into a savepoint: not ours.
        if not statement.startswith(("SAVEPOINT", "RELEASE SAVEPOINT")):
            statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


MESSAGE_COLUMNS = (
    "status",
    "sent_at",
    "lease_until",
    "unknown_attempts",
    "rate_limited_attempts",
    "had_unknown_outcome",
    "failure_class",
    "attempt",
    "cycle",
    "next_attempt_at",
    "pending_verdict",
)
ATTEMPT_COLUMNS = ("finished_at", "outcome", "http_status", "error", "response_body")
EVENT_COLUMNS = (
    "cycle",
    "source",
    "kind",
    "from_status",
    "to_status",
    "applied",
    "refusal",
    "provider_time",
    "received_at",
    "actor",
    "dedupe_key",
)


def written(db: Database, message_id: int) -> dict[str, Any]:
    with db.transaction() as session:
        message = session.get(Message, message_id, populate_existing=True)
        assert message is not None
        attempts = session.scalars(select(Attempt).where(Attempt.message_id == message_id)).all()
        events = session.scalars(
            select(MessageEvent)
            .where(MessageEvent.message_id == message_id)
            .order_by(MessageEvent.id)
        ).all()
        return {
            "message": {name: getattr(message, name) for name in MESSAGE_COLUMNS},
            "attempts": [{n: getattr(a, n) for n in ATTEMPT_COLUMNS} for a in attempts],
            "events": [{n: getattr(e, n) for n in EVENT_COLUMNS} for e in events],
            "details": [e.detail for e in events],
            "provider_message_id": message.provider_message_id,
        }
