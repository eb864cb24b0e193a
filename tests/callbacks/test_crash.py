"""Nothing is lost when the machinery dies: a worker SIGKILLed between its POST and its
record leaves the callback due again once its lease ends (the repeat carries the same
`webhook-id`, which the receiver drops), and a Redis flush that loses the ring is repaired
by the sweeper's next pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from flask import Flask
from redis import Redis
from rq import SimpleWorker

from app.callback_models import DELIVERED, PENDING
from app.clock import utcnow
from app.db import Database
from jobs.callbacks import callback_queue, deliver_due, ring_endpoint
from jobs.sweep import sweep_once

from ..conftest import PG_URL, REDIS_URL
from ..factories import World, make_world
from .conftest import BOX, add_endpoint, delivered_message, outbox, sent_message
from .receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]

# Posts the endpoint's due callbacks with the real clock, in a process of its own.
WORKER = """
import sys
from app.crypto import get_box
from app.db import get_db
from jobs.callbacks import deliver_due
from tests.conftest import make_app

app = make_app(sys.argv[1], sys.argv[2], callback_allow_hosts=("127.0.0.1",),
               callback_timeout=30.0)
with app.app_context():
    deliver_due(get_db(), get_box(), app.config["RATCHET"], int(sys.argv[3]))
"""


@pytest.fixture
def world(committed_db: Database) -> World:
    return make_world(committed_db)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver().start()
    yield made
    made.stop()


def test_a_worker_killed_between_post_and_record_loses_nothing_and_sends_no_second_id(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    db = committed_db
    receiver.script = ["block"]  # takes the POST, applies it, never answers
    endpoint_id = add_endpoint(db, world, receiver)
    message_id = sent_message(db, world, "wamid.K1")
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, PG_URL, REDIS_URL, str(endpoint_id)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert receiver.got_one.wait(60), "the worker never posted"
        os.kill(worker.pid, signal.SIGKILL)
        assert worker.wait(30) == -signal.SIGKILL
    finally:
        if worker.poll() is None:
            worker.kill()
    receiver.release.set()
    (row,) = outbox(db)
    assert row.state == PENDING and row.attempts == 1  # posted, never recorded
    now = utcnow()
    deliver_due(db, BOX, app.config["RATCHET"], endpoint_id, lambda: now)
    assert outbox(db)[0].state == PENDING  # its lease still runs: not posted twice at once
    later = row.next_attempt_at + timedelta(seconds=1)
    deliver_due(db, BOX, app.config["RATCHET"], endpoint_id, lambda: later)
    assert outbox(db)[0].state == DELIVERED
    assert [seen.webhook_id for seen in receiver.seen] == [f"cb_{row.id}"] * 2
    assert [body["data"]["message_id"] for body in receiver.applied_in_order()] == [message_id]


def test_a_redis_flush_loses_the_ring_and_the_sweeper_rings_again(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    db = committed_db
    config = app.config["RATCHET"]
    endpoint_id = add_endpoint(db, world, receiver)
    message_id = delivered_message(db, world, "wamid.K2")
    redis = Redis.from_url(config.redis_url)
    try:
        assert ring_endpoint(endpoint_id, config)
        assert callback_queue(redis).count == 1
        redis.flushdb()  # the job, and the key that says one is pending, gone
        assert callback_queue(redis).count == 0
        result = sweep_once(db, config, utcnow())
        assert result.callback_endpoints == 1
        SimpleWorker([callback_queue(redis)], connection=redis).work(burst=True)
    finally:
        redis.close()
    assert {row.state for row in outbox(db)} == {DELIVERED}
    assert [b["data"]["sequence"] for b in receiver.applied_in_order()] == [1, 2, 3]
    assert {b["data"]["message_id"] for b in receiver.applied_in_order()} == {message_id}
