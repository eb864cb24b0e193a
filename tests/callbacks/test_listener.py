"""The doorbell of callbacks: a change's commit NOTIFYs the endpoints it wrote for, and the
sweeper's listener thread rings their drains at once (no waiting for the next pass); a
change that rolls back rings nothing."""

from __future__ import annotations

import time

from flask import Flask
from redis import Redis

from app.db import Database
from app.lifecycle import Source, Status
from app.repo.transitions import apply_status
from jobs.callback_listener import CallbackListener
from jobs.callbacks import callback_queue

from ..factories import make_world
from .conftest import add_endpoint, at, sent_message
from .receiver import Receiver


def rung(redis: Redis, endpoint_id: int) -> bool:
    """Wait (up to 10 s) for a drain of the endpoint to be enqueued."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(job.args[0] == endpoint_id for job in callback_queue(redis).jobs):
            return True
        time.sleep(0.02)
    return False


def test_a_committed_change_rings_its_endpoint_and_a_rolled_back_one_does_not(
    app: Flask, committed_db: Database
) -> None:
    db = committed_db
    config = app.config["RATCHET"]
    acme, other = make_world(db), make_world(db, name="other", account_id="2000002")
    mine = add_endpoint(db, acme, Receiver(port=9))
    theirs = add_endpoint(db, other, Receiver(port=9))
    redis = Redis.from_url(config.redis_url)
    listener = CallbackListener(db.engine, config, redis)
    listener.start()
    try:
        assert listener.listening.wait(10)
        rolled_back = sent_message(db, acme, "wamid.L1")
        assert rung(redis, mine)
        redis.flushdb()
        try:
            with db.transaction() as session:
                apply_status(session, rolled_back, Status.DELIVERED, Source.WEBHOOK, at(5))
                raise RuntimeError("the transaction fails after the change")
        except RuntimeError:
            pass
        # Notifications arrive in commit order: once this later one has rung, the rolled
        # back change would have rung before it.
        sent_message(db, other, "wamid.L2")
        assert rung(redis, theirs)
        assert [job.args[0] for job in callback_queue(redis).jobs] == [theirs]
    finally:
        listener.stop()
        listener.join(5)
        redis.close()
