"""Retries happen on time and verdicts wait their grace, against the sandbox over HTTP.

- The last unknown outcome of a cycle waits the webhook grace like every other: a `sent`
  webhook arriving seconds later still wins, and without one the verdict is recorded with
  no provider call and no new attempt.
- With the sweeper off, every retry rung through RQ's scheduler still happens, and none
  before its `next_attempt_at` (RQ keeps whole seconds).
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime, timedelta

import pytest
from redis import Redis
from rq import Queue, SimpleWorker
from rq.scheduler import RQScheduler
from sqlalchemy import select

from app.clock import utcnow
from app.models import Attempt, MessageEvent
from jobs.queues import queue_name, whole_second_after

from .conftest import Env

TIMEOUT_AFTER_ACCEPT = "15550000001"
UNAVAILABLE_TWICE = "15550000003"


@pytest.mark.slow
def test_a_sent_webhook_arriving_after_the_last_unknown_outcome_still_wins(env: Env) -> None:
    env.config = dataclasses.replace(env.config, cap_unknown=1)
    # Accepted, the answer lost to our timeout, the webhooks a little later.
    number = env.number(webhook_delay_ms=1500)
    message_id = env.send(number, TIMEOUT_AFTER_ACCEPT)
    outcome = env.attempt(message_id)
    assert outcome.startswith("exhausted at") and "unless a webhook answers" in outcome
    row = env.message(message_id)
    assert (row.status, row.pending_verdict) == ("sending", "exhausted")
    assert row.next_attempt_at == env.now + timedelta(seconds=env.config.webhook_grace)
    # Each webhook post waits 1.5 s: until the read is applied (a quiet spell of 2 s was
    # once too short on a loaded machine, between delivered and read).
    deadline = time.monotonic() + 30
    while env.message(message_id).status != "read" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert env.message(message_id).status == "read"
    env.settle(number)  # and nothing after it
    # The verdict's time comes: nothing is owed any more, and nothing is sent.
    env.now = row.next_attempt_at + timedelta(seconds=1)
    assert env.attempt(message_id) == "not claimed"
    row = env.message(message_id)
    assert (row.status, row.failure_class, row.attempt) == ("read", None, 1)
    assert len(env.requests(number)) == 1


@pytest.mark.slow
def test_without_any_webhook_the_verdict_is_recorded_after_the_grace_with_no_new_attempt(
    env: Env,
) -> None:
    env.config = dataclasses.replace(env.config, cap_unknown=1)
    number = env.number(statuses=[])
    message_id = env.send(number, TIMEOUT_AFTER_ACCEPT)
    env.attempt(message_id)
    due = env.message(message_id).next_attempt_at
    assert due is not None
    env.now = due - timedelta(milliseconds=1)
    assert env.attempt(message_id) == "not claimed"  # not before its time
    env.now = due
    assert env.attempt(message_id) == "failed: exhausted (after the webhook grace)"
    row = env.message(message_id)
    assert (row.status, row.failure_class, row.attempt, row.pending_verdict) == (
        "failed",
        "exhausted",
        1,
        None,
    )
    assert row.dead_letter_rank == 0  # exhausted: first in the dead-letter list
    with env.db.transaction() as session:
        attempts = session.scalars(select(Attempt).where(Attempt.message_id == message_id)).all()
    assert len(attempts) == 1 and len(env.requests(number)) == 1


def test_a_ring_for_a_fraction_of_a_second_is_rounded_up_to_the_next_whole_second() -> None:
    at = datetime(2026, 12, 1, 10, 0, 0, 700_000).astimezone()
    assert whole_second_after(at) == at.replace(microsecond=0) + timedelta(seconds=1)
    exact = at.replace(microsecond=0)
    assert whole_second_after(exact) == exact


@pytest.mark.slow
def test_with_the_sweeper_off_every_retry_happens_and_none_before_its_time(env: Env) -> None:
    # The real clock here: RQ's scheduler decides by it.
    config = dataclasses.replace(env.config, webhook_grace=0.3, backoff_base=0.4)
    env.app.config["RATCHET"] = config
    env.config = config
    number = env.number()
    redis = Redis.from_url(config.redis_url)
    queue = Queue(queue_name("campaign"), connection=redis)
    scheduler = RQScheduler([queue], connection=redis)
    assert scheduler.acquire_locks()
    worker = SimpleWorker([queue], connection=redis)
    # First attempts an eighth of a second apart, so the retry times fall all over the
    # second: RQ's whole seconds would ring some of them early.
    ids = []
    for _ in range(8):
        ids.append(env.send(number, UNAVAILABLE_TWICE))
        worker.work(burst=True)
        time.sleep(0.125)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            scheduler.enqueue_scheduled_jobs()
            worker.work(burst=True)
            if all(env.message(i).status not in ("queued", "sending") for i in ids):
                break
            time.sleep(0.1)
    finally:
        scheduler.release_locks()
        redis.close()
    env.settle(number)
    for message_id in ids:
        row = env.message(message_id)
        assert (row.status, row.attempt) == ("read", 3), message_id
        with env.db.transaction() as session:
            claims = session.scalars(
                select(MessageEvent)
                .where(MessageEvent.message_id == message_id, MessageEvent.kind == "claim")
                .order_by(MessageEvent.id)
            ).all()
        assert [c.detail["attempt"] for c in claims if c.detail] == [1, 2, 3]
        for claim in claims[1:]:
            assert claim.detail is not None and claim.detail["due_at"] is not None
            assert claim.received_at >= datetime.fromisoformat(claim.detail["due_at"])
    assert utcnow() > env.now  # the clock really moved: these were real waits
