"""A drain short of a pacing slot hands its worker back only to a drain that no idle
worker is taking: a job queued a moment ago (another drain rung to the back of the queue
at its slice's end) is taken by an idle worker within milliseconds, and handing the worker
back for it sent this drain through RQ's scheduler, a whole second or more later."""

from __future__ import annotations

import threading
import time

from redis import Redis
from rq import Queue

from jobs.queues import IDLE_WORKER_GRACE, get_queue, others_waiting

from .conftest import Env


def a_queue(env: Env) -> tuple[Redis, Queue]:
    redis = env.app.extensions["ratchet.redis"]
    queue = get_queue("campaign", redis)
    queue.empty()
    return redis, queue


def test_a_job_an_idle_worker_takes_at_once_is_not_one_waiting(env: Env) -> None:
    redis, queue = a_queue(env)
    grace = 0.5  # generous: a loaded CI
    job = queue.enqueue("jobs.drain.wake_drain", 1, "campaign")

    def idle_worker() -> None:
        time.sleep(0.05)
        queue.remove(job)

    taker = threading.Thread(target=idle_worker)
    taker.start()
    try:
        assert not others_waiting(redis, "campaign", grace, within=1.0)
    finally:
        taker.join()


def test_a_job_no_worker_takes_is_one_waiting_and_an_empty_queue_none(env: Env) -> None:
    redis, queue = a_queue(env)
    assert not others_waiting(redis, "campaign", IDLE_WORKER_GRACE, within=1.0)
    queue.enqueue("jobs.drain.wake_drain", 1, "campaign")
    assert others_waiting(redis, "campaign", IDLE_WORKER_GRACE, within=1.0)
    queue.empty()


def test_a_numbers_own_other_shards_are_not_others_waiting(env: Env) -> None:
    """Its sibling shards wait for the same pacing budget: handing them the worker at a
    pacing wait only delays this drain by a trip through RQ's scheduler."""
    redis, queue = a_queue(env)
    queue.enqueue("jobs.drain.drain", 7, "campaign", "token1", 1)
    queue.enqueue("jobs.drain.wake_drain", 7, "campaign", 2)
    assert not others_waiting(redis, "campaign", IDLE_WORKER_GRACE, within=1.0, identity_id=7)
    # Another number's drain is one waiting; so is anything when no number is named.
    assert others_waiting(redis, "campaign", IDLE_WORKER_GRACE, within=1.0)
    queue.enqueue("jobs.drain.drain", 8, "campaign", "token2")
    assert others_waiting(redis, "campaign", IDLE_WORKER_GRACE, within=1.0, identity_id=7)
    queue.empty()
