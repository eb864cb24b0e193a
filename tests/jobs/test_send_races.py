"""Races the send job must win: two jobs for one message, a lease lost mid-call, and a
broken sender that must hold its queue rather than burn it."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import timedelta

import pytest
from redis import Redis
from rq import Queue, SimpleWorker
from sqlalchemy import select

from app.models import Identity, Message
from jobs.queues import queue_name
from jobs.send import send_one

from .conftest import Env


@pytest.mark.slow
def test_two_jobs_for_one_message_make_one_provider_call(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15551230010")
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def job() -> None:
        barrier.wait(timeout=10)
        outcomes.append(env.attempt(message_id))

    threads = [threading.Thread(target=job) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(o.split(" ")[0] for o in outcomes) == ["accepted", "not"]
    assert len(env.requests(number)) == 1


@pytest.mark.slow
def test_a_worker_whose_lease_expired_mid_call_cannot_overwrite_the_next_attempt(
    env: Env,
) -> None:
    # Keys ignored, no webhooks: the first call hangs past its lease and then succeeds;
    # meanwhile a second worker re-claims the message and times out (unknown, retry later).
    number = env.number(honour_idempotency_keys=False, statuses=[])
    message_id = env.send(number, "15550000001")
    slow_config = dataclasses.replace(env.config, provider_timeout=4.0)
    claimed_at = env.now
    first: list[str] = []

    def slow_worker() -> None:
        outcome, _ = send_one(env.db, env.box, slow_config, message_id, lambda: claimed_at)
        first.append(outcome)

    thread = threading.Thread(target=slow_worker)
    thread.start()
    deadline = time.monotonic() + 10
    while not env.requests(number) and time.monotonic() < deadline:
        time.sleep(0.02)
    # The lease (2 x 4 s + 5 s) has expired on the second worker's clock.
    env.now = claimed_at + timedelta(seconds=slow_config.lease_seconds + 1)
    second = env.attempt(message_id)
    thread.join(timeout=30)

    # The re-claim makes no call: the lost attempt may have reached the provider (it had),
    # so it waits the webhook grace like any unknown outcome.
    assert second.startswith("retry at") and "lease expired unanswered" in second
    # The first worker's answer then arrives: fenced off, but still a fact about this
    # cycle. The provider has the message, so it is recorded and no retry sends it again.
    assert first == ["accepted late (sent): the lease had been taken over"]
    (accepted,) = env.accepted(number)
    row = env.message(message_id)
    assert (row.status, row.attempt, row.provider_message_id) == ("sent", 2, accepted["wamid"])
    assert row.next_attempt_at is None and row.had_unknown_outcome
    assert row.unknown_attempts == 1  # the lost first attempt
    env.now = env.now + timedelta(minutes=5)
    assert env.attempt(message_id) == "not claimed"


@pytest.mark.slow
def test_an_invalid_token_pauses_the_identity_and_holds_its_messages_until_resumed(
    env: Env,
) -> None:
    number = env.number(token="expired-token")
    ids = [env.send(number, f"155512300{n:02d}") for n in range(3)]
    outcome = env.attempt(ids[0])
    assert outcome.startswith("held: identity paused (code 190")
    for message_id in ids[1:]:
        assert env.attempt(message_id) == "not claimed"
    with env.db.transaction() as session:
        identity = session.get(Identity, number["identity_id"])
        assert identity is not None and identity.paused_at is not None
        assert "190" in (identity.paused_reason or "")
        rows = session.scalars(select(Message).where(Message.id.in_(ids))).all()
    assert all(r.status in ("sending", "queued") for r in rows)  # none failed
    assert all(r.unknown_attempts == 0 and r.rate_limited_attempts == 0 for r in rows)
    held = next(r for r in rows if r.id == ids[0])
    assert (held.status, held.next_attempt_at, held.failure_class) == (
        "sending",
        None,
        "sender_broken",
    )
    assert len(env.requests(number)) == 1

    cli = env.app.test_cli_runner()
    update = cli.invoke(
        args=["identity", "update", str(number["identity_id"]), "--token", "good-token"]
    )
    assert update.exit_code == 0, update.output
    resume = cli.invoke(args=["identity", "resume", str(number["identity_id"])])
    assert resume.exit_code == 0 and "3 waiting messages due now, 3 rung" in resume.output

    redis = Redis.from_url(env.config.redis_url)
    SimpleWorker([Queue(queue_name("campaign"), connection=redis)], connection=redis).work(
        burst=True
    )
    redis.close()
    env.settle(number)
    for message_id in ids:
        assert env.message(message_id).status == "read"
    assert len(env.accepted(number)) == 3
