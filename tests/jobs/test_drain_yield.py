"""A drain short of a pacing slot hands its worker back only to a drain that no idle
worker is taking: a job queued a moment ago (another drain rung to the back of the queue
at its slice's end) is taken by an idle worker within milliseconds, and handing the worker
back for it sent this drain through RQ's scheduler, a whole second or more later."""

from __future__ import annotations

import threading
import time

import pytest
from rq import Queue

from jobs import drain as drain_module
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import get_queue

from .conftest import Env


def a_drain(env: Env) -> tuple[Drain, Queue]:
    number = env.number(statuses=[])
    redis = env.app.extensions["ratchet.redis"]
    queue = get_queue("campaign", redis)
    queue.empty()
    drain = Drain(
        env.db, env.box, env.config, redis, Pacer(redis), number["identity_id"], "campaign"
    )
    return drain, queue


def test_a_job_an_idle_worker_takes_at_once_is_not_one_waiting(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    drain, queue = a_drain(env)
    monkeypatch.setattr(drain_module, "IDLE_WORKER_GRACE", 0.5)  # generous: a loaded CI
    job = queue.enqueue("jobs.drain.wake_drain", 1, "campaign")

    def idle_worker() -> None:
        time.sleep(0.05)
        queue.remove(job)

    taker = threading.Thread(target=idle_worker)
    taker.start()
    try:
        assert not drain._others_waiting(within=1.0)
    finally:
        taker.join()


def test_a_job_no_worker_takes_is_one_waiting_and_an_empty_queue_none(env: Env) -> None:
    drain, queue = a_drain(env)
    assert not drain._others_waiting(within=1.0)
    queue.enqueue("jobs.drain.wake_drain", 1, "campaign")
    assert drain._others_waiting(within=1.0)
    queue.empty()
