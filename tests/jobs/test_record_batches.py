"""A drain records its provider's acceptances a batch at a time: one statement for the
moves, attempts and events of every acceptance that ended together, and one for the
statuses parked for their ids (`app/repo/accept_batch.py`), where each acceptance had
two statements of its own (`accept_at_once`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import event

from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env

CALLS = 16


def test_a_drains_acceptances_are_recorded_a_batch_at_a_time(env: Env) -> None:
    # Answers 300 ms late: the calls, begun together, mostly end together.
    number = env.number(statuses=[], rate_limit_mps=None, answer_delay_ms=300)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=1000.0, total_rate=1000.0)
    ids = [env.send(number, f"155571400{n:02d}", lane="campaign") for n in range(CALLS)]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "batches", px=60_000)
    config = dataclasses.replace(env.config, drain_batch=CALLS, drain_concurrency=CALLS)
    sent: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(" ".join(statement.split()))

    event.listen(env.db.engine, "before_cursor_execute", on_execute)
    try:
        summary = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign").run(
            "batches"
        )
    finally:
        event.remove(env.db.engine, "before_cursor_execute", on_execute)

    assert f"{CALLS} accepted" in summary, summary
    assert [env.message(i).status for i in ids] == ["sent"] * CALLS
    batches = [s for s in sent if s.startswith("WITH given AS")]
    alone = [s for s in sent if s.startswith("WITH moved AS")]
    parked_alone = [s for s in sent if "webhook_statuses.provider_message_id = %(" in s]
    assert alone == [] and parked_alone == [], (alone, parked_alone)
    assert 1 <= len(batches) <= CALLS
