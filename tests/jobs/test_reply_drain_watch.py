"""A reply never waits behind another reply's call: a reply drain whose calls are in flight
claims what was rung meanwhile and sends it at once (`Drain._collect`, watching the dirty
flag), and still collects every call before it lets go of its identity and lane."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from app.clock import utcnow
from app.config import Config
from app.models import Message
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys
from jobs.ringing import ring_identity

from .conftest import Env

SLOW = "15550000001"  # the sandbox accepts, then answers after the number's hang_seconds
# The slow answer comes SLOW_ANSWER late, well inside the drain's provider timeout (the
# fixture's is 1 s; these drains get their own), so every call here is accepted.
SLOW_ANSWER = 1.5
TIMEOUT = 2.5


def wait_for(what: str, check: Any, limit: float = 15.0) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError(f"no {what} within {limit:.0f} s")


def slow_number(env: Env, **rates: float) -> dict[str, Any]:
    """A number whose SLOW recipient is answered SLOW_ANSWER late, with these rates."""
    number = env.number(statuses=[], hang_seconds=SLOW_ANSWER)
    env.set_rates(number, **rates)
    return number


def drain_during_the_first_call(
    env: Env,
    number: dict[str, Any],
    lane: str,
    config: Config,
    token: str,
    during: Callable[[], None],
    seen: dict[str, Any],
) -> str:
    """Run the drain of `lane` in this thread, holding its key as `token`, while a helper
    thread waits for the provider to have the first message, then runs `during` (its
    call still in flight); what `during` raises is reported here. Returns the summary."""
    redis = env.app.extensions["ratchet.redis"]

    def helper() -> None:
        try:
            wait_for("the first message at the sandbox", lambda: env.accepted(number))
            during()
        except BaseException as exc:  # reported by the test's own thread
            seen["error"] = exc

    thread = threading.Thread(target=helper)
    thread.start()
    drain = Drain(env.db, env.box, config, redis, Pacer(redis), number["identity_id"], lane)
    summary = drain.run(token)
    thread.join(timeout=30)
    assert "error" not in seen, seen.get("error")
    return summary


def drain_with_a_second_message_during_a_slow_call(
    env: Env, lane: str, second_to: str
) -> tuple[int, dict[str, Any], str]:
    """While the first message's call is in flight (its answer comes SLOW_ANSWER late,
    inside the provider timeout), commit and ring a second one, wait for the provider to
    have it, and note the first's attempt outcomes at that moment."""
    number = slow_number(env, reply_rate=100.0, campaign_rate=100.0, total_rate=200.0)
    redis = env.app.extensions["ratchet.redis"]
    token = f"watching-{lane}"
    key = drain_keys(number["identity_id"], lane)[0]
    redis.set(key, token, px=60_000)  # rings only mark it
    first = env.send(number, SLOW, lane=lane)
    seen: dict[str, Any] = {"number": number}

    def second_message() -> None:
        seen["second"] = env.send(number, second_to, lane=lane)
        wait_for("the second at the sandbox", lambda: len(env.accepted(number)) == 2)
        seen["first outcomes then"] = env.attempt_outcomes(first)

    config = dataclasses.replace(env.config, provider_timeout=TIMEOUT)
    summary = drain_during_the_first_call(env, number, lane, config, token, second_message, seen)
    assert redis.get(key) is None  # let go
    return first, seen, summary


def test_a_reply_rung_during_another_replys_call_reaches_the_provider_before_that_call_ends(
    env: Env,
) -> None:
    first, seen, summary = drain_with_a_second_message_during_a_slow_call(
        env, "reply", "15557300002"
    )

    # The moment the provider had the second reply, the first's call had not ended (its
    # attempt had no outcome yet).
    assert seen["first outcomes then"] == [None]
    # Both sent once, and the drain ended only after collecting both calls.
    assert "2 accepted" in summary, summary
    assert [env.message(i).status for i in (first, seen["second"])] == ["sent", "sent"]
    assert env.attempt_outcomes(first) == ["accepted"]
    assert env.attempt_outcomes(seen["second"]) == ["accepted"]
    assert sorted(a["to"] for a in env.accepted(seen["number"])) == [SLOW, "15557300002"]


def test_a_campaign_drain_still_waits_for_its_batch_before_it_looks_again(env: Env) -> None:
    """Only the reply lane watches for rings: a campaign batch ends before the next claim."""
    first, seen, summary = drain_with_a_second_message_during_a_slow_call(
        env, "campaign", "15557300003"
    )

    assert seen["first outcomes then"] == ["accepted"]
    assert "2 accepted" in summary, summary
    assert [env.message(i).status for i in (first, seen["second"])] == ["sent", "sent"]


def test_calls_claimed_while_others_are_in_flight_never_queue_past_their_leases(
    env: Env,
) -> None:
    """Four retries come due (rung as the sweeper does) while one reply's 1.5 s call is in
    flight, with two call threads, a batch of four and a latest start 2.5 s after the
    claim (the provider timeout). Claiming all four at once would queue the last behind
    the first call and one of its own: it would start about 3 s after its claim and stand
    down unsent. The step claims only the free thread's worth, and the rest at the next."""
    # Every answer SLOW_ANSWER late, to five people: one person's messages would go one
    # after another (each conversation in order), never side by side.
    number = env.number(statuses=[], answer_delay_ms=int(SLOW_ANSWER * 1000))
    env.set_rates(number, reply_rate=1000.0, campaign_rate=1000.0, total_rate=2000.0)
    identity_id = number["identity_id"]
    config = dataclasses.replace(
        env.config,
        provider_timeout=TIMEOUT,
        drain_batch=4,
        drain_concurrency=2,
        lease_margin=0.5,
        webhook_grace=0.5,
    )
    assert config.lease_seconds - config.provider_timeout - config.lease_margin == TIMEOUT
    redis = env.app.extensions["ratchet.redis"]
    token = "queue-wait"
    redis.set(drain_keys(identity_id, "reply")[0], token, px=60_000)
    first = env.send(number, "15557300010", lane="reply")
    later = [env.send(number, f"1555730002{n}", lane="reply") for n in range(4)]
    with env.db.transaction() as session:  # four retries, due in an hour
        session.execute(
            update(Message)
            .where(Message.id.in_(later))
            .values(status="sending", next_attempt_at=utcnow() + timedelta(hours=1))
        )

    def retries_come_due() -> None:
        with env.db.transaction() as session:
            session.execute(
                update(Message)
                .where(Message.id.in_(later))
                .values(next_attempt_at=utcnow() - timedelta(milliseconds=1))
            )
        with env.app.app_context():
            ring_identity(identity_id, "reply", config)

    summary = drain_during_the_first_call(env, number, "reply", config, token, retries_come_due, {})

    assert "stood" not in summary, summary
    assert [env.message(i).status for i in [first, *later]] == ["sent"] * 5, summary


def test_a_drain_taken_over_with_a_call_in_flight_still_counts_that_calls_outcome(
    env: Env,
) -> None:
    number = slow_number(env, reply_rate=1000.0, campaign_rate=1000.0, total_rate=2000.0)
    config = dataclasses.replace(env.config, provider_timeout=TIMEOUT, drain_concurrency=2)
    redis = env.app.extensions["ratchet.redis"]
    pending, dirty = drain_keys(number["identity_id"], "reply")
    redis.set(pending, "mine", px=60_000)
    first = env.send(number, SLOW, lane="reply")

    def take_over() -> None:
        redis.set(pending, "theirs", px=60_000)  # our key expired; another ring won it
        redis.set(dirty, "1", px=60_000)

    summary = drain_during_the_first_call(env, number, "reply", config, "mine", take_over, {})

    assert env.message(first).status == "sent"
    assert "1 accepted" in summary, summary
    assert "another drain holds" in summary, summary
    assert redis.get(pending) == b"theirs"  # not ours to release


class CountingRedis:
    """The drain's Redis, counting the commands its own thread sends."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self._thread = threading.current_thread()
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._redis, name)
        if not callable(target):
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is self._thread:
                self.calls[name] = self.calls.get(name, 0) + 1
            return target(*args, **kwargs)

        return counted


def watched_slow_reply(env: Env, concurrency: int) -> tuple[dict[str, int], float]:
    """One reply answered SLOW_ANSWER late and nothing else rung: the drain's own Redis
    commands, and how long it ran."""
    number = slow_number(env, reply_rate=1000.0, campaign_rate=1000.0, total_rate=2000.0)
    identity_id = number["identity_id"]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "reply")[0], "poll", px=60_000)
    first = env.send(number, SLOW, lane="reply")
    config = dataclasses.replace(
        env.config, provider_timeout=TIMEOUT, drain_concurrency=concurrency
    )
    counting = CountingRedis(redis)
    drain = Drain(env.db, env.box, config, counting, Pacer(redis), identity_id, "reply")  # type: ignore[arg-type]
    started = time.monotonic()
    summary = drain.run("poll")
    ran = time.monotonic() - started
    assert env.message(first).status == "sent", summary
    return counting.calls, ran


def test_a_reply_drain_waiting_on_a_slow_call_looks_for_rings_at_a_bounded_rate(
    env: Env,
) -> None:
    calls, ran = watched_slow_reply(env, concurrency=10)
    # At most one look every 20 ms (it looks every 50 ms): a poll in a tight loop would
    # send hundreds.
    assert 0 < calls.get("exists", 0) <= ran / 0.02, (calls, ran)


def test_a_reply_drain_with_every_call_thread_busy_does_not_look_for_rings(env: Env) -> None:
    calls, _ = watched_slow_reply(env, concurrency=1)
    assert "exists" not in calls, calls


def test_replies_due_beyond_the_free_threads_go_as_a_thread_frees_not_after_every_call(
    env: Env,
) -> None:
    """A step claims no more than its free call threads. Replies already due beyond them
    are claimed as soon as one thread is free, not once every call in flight has ended: a
    slow reply holds its own thread only. (Found by review: with the claim capped, the
    rest waited for the slow call's answer, threads idle.)"""
    number = slow_number(env, reply_rate=1000.0, campaign_rate=1000.0, total_rate=2000.0)
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(number["identity_id"], "reply")[0], "capped", px=60_000)
    slow = env.send(number, SLOW, lane="reply")
    fast = [env.send(number, f"155573900{n:02d}", lane="reply") for n in range(4)]
    seen: dict[str, Any] = {}

    def all_at_the_provider() -> None:
        wait_for("every reply at the sandbox", lambda: len(env.accepted(number)) == 5)
        seen["slow outcomes then"] = env.attempt_outcomes(slow)

    config = dataclasses.replace(env.config, provider_timeout=TIMEOUT, drain_concurrency=2)
    summary = drain_during_the_first_call(
        env, number, "reply", config, "capped", all_at_the_provider, seen
    )

    # The provider had all five while the slow reply's call was still waiting for its answer.
    assert seen["slow outcomes then"] == [None]
    assert "5 accepted" in summary, summary
    assert [env.message(i).status for i in [slow, *fast]] == ["sent"] * 5
