"""A drain's PostgreSQL connections stay at one however many calls it has in flight: its
call threads only call, and its own thread records what ended, many in one transaction.

Before, each call thread recorded its own answer on a connection of its own, so a batch
whose answers came back together held as many connections as calls."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from sqlalchemy import event

from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env

CALLS = 16


def test_a_drain_with_many_calls_in_flight_records_on_one_connection(env: Env) -> None:
    number = env.number(statuses=[], rate_limit_mps=None, answer_delay_ms=300)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=1000.0, total_rate=1000.0)
    ids = [env.send(number, f"155571300{n:02d}", lane="campaign") for n in range(CALLS)]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "conns", px=60_000)
    config = dataclasses.replace(env.config, drain_batch=CALLS, drain_concurrency=CALLS)
    pool = env.db.engine.pool
    lock = threading.Lock()
    out = {"now": 0, "most": 0}

    def checkout(*_: Any) -> None:
        with lock:
            out["now"] += 1
            out["most"] = max(out["most"], out["now"])

    def checkin(*_: Any) -> None:
        with lock:
            out["now"] -= 1

    event.listen(pool, "checkout", checkout)
    event.listen(pool, "checkin", checkin)
    try:
        summary = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign").run(
            "conns"
        )
    finally:
        event.remove(pool, "checkout", checkout)
        event.remove(pool, "checkin", checkin)

    assert f"{CALLS} accepted" in summary, summary
    assert [env.message(i).status for i in ids] == ["sent"] * CALLS
    assert out["most"] == 1, out  # sixteen calls in flight, one connection
