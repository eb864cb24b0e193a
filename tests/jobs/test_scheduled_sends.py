"""Scheduled and expiring sends end to end (issue 34), against the sandbox provider with
the worker's clock passed in: a drain with the sweeper off sends a scheduled message at
its time, not before, having rung itself for it; a message that expires between its
claim and its call is never called; a retry that would come after the expiry is not
scheduled."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from rq import Queue
from sqlalchemy import select

from app.clock import utcnow
from app.models import Attempt
from jobs.queues import queue_name

from ..views.api_requests import iso
from .conftest import Env
from .drain_runs import run_drain

RATE_LIMITED_ONCE = "15550000004"  # the sandbox's 429 (Retry-After: 2) once per message


def test_a_drain_sends_a_scheduled_message_at_its_time_and_rings_itself_for_it(
    env: Env,
) -> None:
    number = env.number()
    identity_id = number["identity_id"]
    send_at = (utcnow() + timedelta(hours=1)).replace(microsecond=0)
    message_id = env.send(number, "15557700001", lane="campaign", send_at=iso(send_at))
    env.now = send_at - timedelta(seconds=1)

    run_drain(env, identity_id, "campaign", "early")
    assert env.accepted(number) == []
    assert env.message(message_id).status == "queued"
    # With no sweeper, the drain's own wake-up for the message's time is all there is.
    redis = env.app.extensions["ratchet.redis"]
    scheduled = Queue(queue_name("campaign"), connection=redis).scheduled_job_registry
    times = [scheduled.get_scheduled_time(job_id) for job_id in scheduled.get_job_ids()]
    assert send_at in times, times

    env.now = send_at  # the wake-up comes
    run_drain(env, identity_id, "campaign", "on-time")
    assert len(env.accepted(number)) == 1
    assert env.message(message_id).status in ("sent", "delivered", "read")


def test_a_message_that_expires_between_claim_and_call_is_never_called(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15557700002", lane="campaign", valid_for=60)
    expires_at = env.message(message_id).expires_at
    assert expires_at is not None
    claim_time = expires_at - timedelta(seconds=1)

    def clock() -> Iterator[datetime]:
        yield claim_time  # claimed while still valid...
        while True:
            yield expires_at  # ...called once it has expired

    times = clock()
    env.now = claim_time
    env.clock = lambda: next(times)  # type: ignore[method-assign]
    outcome = env.attempt(message_id)

    assert outcome == "failed: expired (before the call)"
    assert env.requests(number) == []
    row = env.message(message_id)
    assert (row.status, row.failure_class, row.dead_letter_rank) == ("failed", "expired", None)
    with env.db.transaction() as session:
        outcomes = session.scalars(select(Attempt.outcome).where(Attempt.message_id == message_id))
        assert list(outcomes) == ["expired"]


def test_a_retry_that_would_come_after_the_expiry_is_not_scheduled(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, RATE_LIMITED_ONCE, lane="campaign", valid_for=2)
    env.now = utcnow()  # after the API's clock: the 429's retry lands at or past the expiry
    outcome = env.attempt(message_id)
    assert outcome == "failed: expired"
    assert len(env.requests(number)) == 1
    row = env.message(message_id)
    assert (row.status, row.failure_class, row.next_attempt_at) == ("failed", "expired", None)
