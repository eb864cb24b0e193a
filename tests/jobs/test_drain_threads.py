"""A drain calls the provider from one set of threads for its whole run, not a new pool
per batch (starting the threads again for every batch was CPU each send paid for), and
leaves none of them behind when it ends."""

from __future__ import annotations

import dataclasses
import logging
import threading

import pytest

from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env


def test_a_drain_sends_every_batch_from_the_same_threads_and_stops_them_when_it_ends(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    ids = [env.send(number, f"1555710{n:04d}", lane="campaign") for n in range(9)]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "threads", px=60_000)
    # Three messages a batch, two calls at once: three batches, at least two threads busy.
    config = dataclasses.replace(env.config, drain_batch=3, drain_concurrency=2)
    prefix = f"drain-{identity_id}-campaign"

    drain = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign")
    with caplog.at_level(logging.INFO, logger="jobs.drain"):
        summary = drain.run("threads")

    assert "9 accepted" in summary
    assert [env.message(i).status for i in ids] == ["sent"] * 9
    assert len(env.accepted(number)) == 9
    # The one line per send outcome is logged from the thread that made the call.
    senders = [r.threadName for r in caplog.records if r.getMessage().startswith("accepted")]
    assert len(senders) == 9
    assert all(name.startswith(prefix) for name in senders), senders
    assert len(set(senders)) <= config.drain_concurrency, senders
    assert not [t.name for t in threading.enumerate() if t.name.startswith(prefix)]
