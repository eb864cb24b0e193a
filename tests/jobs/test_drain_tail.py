"""A drain that has claimed all that was due, with another job waiting for its worker,
hands its calls in flight to the tail thread (`jobs/tails.py`) and lets its shard go:
the worker starts the next job while the provider answers. The tail records the calls
(fenced as ever) and rings the shard; a drain with no job waiting waits for its calls and
for the tail, and so does a worker before it exits."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from rq.job import Job

from app.db import Database
from jobs.drain import Drain, drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys, get_queue
from jobs.tails import TAILS, Tails
from jobs.worker import run_worker

from ..connection_faults import ForgetfulPath, path, through
from .conftest import Env

__all__ = ["path"]  # the fixture, imported for these tests

SLOW = "15550000001"  # the sandbox holds this recipient's answer for the number's hang_seconds
ANSWER = 3.0  # long beside a drain's own few steps: the tail is still in flight at its end
TIMEOUT = 6.0  # the provider timeout here, so the slow answer is an acceptance


def placeholder() -> None:
    """Another job waiting for the worker (never run here)."""


@pytest.fixture
def slow(env: Env) -> dict[str, Any]:
    env.app.config["RATCHET"] = replace(env.config, provider_timeout=TIMEOUT)
    return number(env, hang_seconds=ANSWER)


def number(env: Env, **settings: Any) -> dict[str, Any]:
    made = env.number(statuses=[], **settings)
    env.set_rates(made, campaign_rate=100.0, total_rate=200.0)
    return made


def redis(env: Env) -> Any:
    return env.app.extensions["ratchet.redis"]


def hold(env: Env, made: dict[str, Any], token: str) -> str:
    """Hold the shard's key as `token` (rings only mark it dirty); returns the key."""
    key = drain_keys(made["identity_id"], "campaign")[0]
    redis(env).set(key, token, px=60_000)
    return key


def another_job(env: Env) -> Job:
    return get_queue("campaign", redis(env)).enqueue(placeholder)


def drains_queued(env: Env, made: dict[str, Any]) -> list[Job]:
    jobs = get_queue("campaign", redis(env)).get_jobs()
    mine = made["identity_id"]
    return [j for j in jobs if j.func_name == "jobs.drain.drain" and j.args[0] == mine]


def test_with_a_job_waiting_a_drain_lets_go_before_its_last_call_is_answered(
    env: Env, slow: dict[str, Any]
) -> None:
    key = hold(env, slow, "tail-1")
    message = env.send(slow, SLOW)
    another_job(env)

    summary = drain(slow["identity_id"], "campaign", "tail-1")

    # Back to the worker with the call still in flight, and the shard let go.
    assert "1 calls in flight handed to the tail thread" in summary, summary
    assert env.attempt_outcomes(message) == [None]
    assert redis(env).get(key) is None
    assert drains_queued(env, slow) == []

    TAILS.wait()
    # The tail recorded the acceptance, then rang the shard for what it may have made due.
    assert env.attempt_outcomes(message) == ["accepted"]
    assert env.message(message).status == "sent"
    assert len(env.accepted(slow)) == 1
    assert len(drains_queued(env, slow)) == 1
    assert redis(env).get(key) is not None


def test_with_no_job_waiting_a_drain_waits_for_its_calls_and_for_the_tail(
    env: Env, slow: dict[str, Any]
) -> None:
    quick = number(env, hang_seconds=0.0)
    hold(env, slow, "tail-slow")
    hold(env, quick, "tail-quick")
    slow_message = env.send(slow, SLOW)
    quick_message = env.send(quick, "15557400001")
    waiting = another_job(env)
    handed = drain(slow["identity_id"], "campaign", "tail-slow")
    assert "1 calls in flight handed to the tail thread" in handed, handed
    waiting.delete()  # the queue is empty now

    summary = drain(quick["identity_id"], "campaign", "tail-quick")

    # Its own call answered at once; it returned only once the tail's was recorded too:
    # a worker with nothing queued has nothing in flight.
    assert "1 accepted" in summary and "handed" not in summary, summary
    assert env.attempt_outcomes(quick_message) == ["accepted"]
    assert env.attempt_outcomes(slow_message) == ["accepted"]


def test_the_next_message_of_a_conversation_waits_for_the_tail_then_follows(
    env: Env, slow: dict[str, Any]
) -> None:
    key = hold(env, slow, "tail-1")
    first = env.send(slow, SLOW, text="part 1")
    second = env.send(slow, SLOW, text="part 2")
    another_job(env)

    handed = drain(slow["identity_id"], "campaign", "tail-1")
    assert "1 calls in flight handed to the tail thread" in handed, handed
    # While the first is in flight, a drain of the same shard claims nothing: the second
    # is the next of a conversation whose message has no outcome yet.
    hold(env, slow, "tail-2")
    meanwhile = drain(slow["identity_id"], "campaign", "tail-2")
    assert "nothing sent" in meanwhile, meanwhile
    assert env.attempt_outcomes(second) == []

    TAILS.wait()
    assert env.attempt_outcomes(first) == ["accepted"]
    # The drain the tail rang sends the second, after the first.
    rung = redis(env).get(key)
    assert rung is not None
    drain(slow["identity_id"], "campaign", rung.decode())
    TAILS.wait()
    assert env.attempt_outcomes(second) == ["accepted"]
    assert [m["body"]["text"]["body"] for m in env.accepted(slow)] == ["part 1", "part 2"]


def test_a_worker_stops_only_once_its_tail_is_recorded(env: Env, slow: dict[str, Any]) -> None:
    message = env.send(slow, SLOW)  # rung: its drain is the first job on the queue
    another_job(env)  # and this one waits behind it: the drain hands its call over

    run_worker("campaign", burst=True)

    assert env.attempt_outcomes(message) == ["accepted"]
    assert env.message(message).status == "sent"


def test_a_tail_whose_record_fails_still_rings_its_shard(
    env: Env,
    slow: dict[str, Any],
    pg_url: str,
    path: ForgetfulPath,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The database goes away while the tail's call is in flight: the answer cannot be
    recorded (its lease lapses, as the lease rule says), and the shard, let go without a
    look, is rung all the same."""
    database = Database(through(pg_url, path), correlation_key=env.db.info["correlation_key"])
    key = hold(env, slow, "tail-1")
    message = env.send(slow, SLOW)
    another_job(env)
    tails = Tails()
    config = env.app.config["RATCHET"]
    drainer = Drain(
        database, env.box, config, redis(env), Pacer(redis(env)), slow["identity_id"], "campaign"
    )
    drainer.tails, drainer.app = tails, env.app
    try:
        summary = drainer.run("tail-1")
        assert "1 calls in flight handed to the tail thread" in summary, summary
        path.close()  # every connection through the path is cut, and no new one is made

        tails.wait()
    finally:
        database.dispose()

    assert len(env.accepted(slow)) == 1  # the provider has it
    assert env.attempt_outcomes(message) == [None]  # not recorded: the lease will lapse
    assert len(drains_queued(env, slow)) == 1  # rung nonetheless
    assert redis(env).get(key) is not None
    # Said in a line or two, as a drain's own stop is, not as a crash's traceback.
    said = [r for r in caplog.records if r.name == "jobs.drain" and "tail" in r.getMessage()]
    assert [r.getMessage() for r in said] == [
        f"the tail of drain {slow['identity_id']}/campaign/0 stopped: OperationalError"
    ]
    assert not [r for r in caplog.records if r.exc_info]
