"""The fault runs' verdict reads the messages and their events in one snapshot
(`verdict_of`, tests/jobs/outcomes.py). Read at READ COMMITTED, a status applied between
its two reads showed a row below its own applied event, and the checker called that a
backward move: the Twilio fault run failed CI so once, its last message's `delivered`
arriving as the run ended. Here the `delivered` lands exactly between the two reads."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event

from app.reconcile import apply_recorded, record_delivery
from app.repo.inbox import IncomingStatus

from ..chaos.checker import Acknowledged
from .conftest import Env
from .outcomes import verdict_of


def test_a_status_applied_while_the_verdict_reads_is_not_a_backward_move(env: Env) -> None:
    number = env.number(statuses=[])  # the sandbox sends no webhook: the test delivers one
    asked = time.time()
    message_id = env.send(number, "15551230001")
    acks = [Acknowledged(message_id, "15551230001", time.time(), asked_at=asked)]
    assert env.attempt(message_id) == "accepted (sent)"
    wamid = env.message(message_id).provider_message_id
    assert wamid

    def deliver() -> None:
        status = IncomingStatus(
            identity_id=number["identity_id"],
            provider="whatsapp",
            provider_message_id=wamid,
            status="delivered",
            provider_time=env.now,
        )
        with env.db.transaction() as session:
            recorded = record_delivery(
                session,
                provider="whatsapp",
                identity_id=number["identity_id"],
                headers={},
                body="{}",
                now=env.now,
                statuses=[status],
            )
        assert apply_recorded(env.db, recorded, env.now).get("applied") == 1

    delivered: list[bool] = []

    def after_the_rows_are_read(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not delivered and "FROM messages" in statement and "correlation_id" in statement:
            delivered.append(True)
            deliver()  # committed on another connection, before the events are read

    event.listen(env.db.engine, "after_cursor_execute", after_the_rows_are_read)
    try:
        verdict = verdict_of(env, number, "whatsapp", acks)
    finally:
        event.remove(env.db.engine, "after_cursor_execute", after_the_rows_are_read)
    assert delivered and env.message(message_id).status == "delivered"
    assert verdict.backward == [] and verdict.clean, verdict.line()
