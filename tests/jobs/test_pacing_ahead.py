"""A campaign's pacing slots taken several at a time, and granted a little ahead when
`RATCHET_PACING_AHEAD` is set, each call started at its own slot: a drain below a
worker's speed claims several messages a step instead of one or two, and the pace at the
provider is what it was."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import func, select

from app.config import Config, ConfigError
from app.models import Attempt, Message
from jobs.drain import Drain
from jobs.in_flight import InFlight
from jobs.pacing import Pacer, Rates
from jobs.queues import drain_keys

from .conftest import Env
from .drain_runs import burst_of, busiest_second

RATE = 80.0  # WhatsApp's default per number: 8 slots of burst, 20 more 0.25 s ahead


@pytest.fixture
def pacer(env: Env) -> Pacer:
    redis: Redis = env.app.extensions["ratchet.redis"]
    return Pacer(redis, burst_seconds=0.1)


def test_slots_granted_ahead_start_one_interval_apart_after_the_burst(pacer: Pacer) -> None:
    rates = Rates(lane=RATE, total=RATE)
    grant = pacer.take(901, "campaign", 100, rates, 0.0, ahead=0.25, gather=True)

    # The burst now, then one slot every 1/80 s up to 0.25 s ahead, never two at once.
    assert grant.slots == 8 + 20 == len(grant.starts)
    assert grant.starts[:8] == (0.0,) * 8
    assert grant.starts[8:] == pytest.approx([k / RATE for k in range(1, 21)], abs=1e-5)
    # Nothing more until half of what could be granted (14) is free: 14 intervals later,
    # less the moment since the grant.
    again = pacer.take(901, "campaign", 100, rates, 0.0, ahead=0.25, gather=True)
    assert again.slots == 0 and again.starts == ()
    assert 0 < again.wait <= 14 / RATE + 1e-6


def test_a_reply_is_not_held_back_by_the_slots_a_campaign_took_ahead(pacer: Pacer) -> None:
    """The lanes within the total (as the CLI keeps them): their own buckets hold it, so a
    campaign's quarter second booked ahead leaves a reply its slot now. Booked on the
    shared total bucket too, it held the reply back 190 ms."""
    campaign = pacer.take(904, "campaign", 100, Rates(RATE, 100.0), 20.0, ahead=0.25)
    assert campaign.slots == 28
    reply = pacer.take(904, "reply", 1, Rates(20.0, 100.0), RATE)
    assert (reply.slots, reply.starts) == (1, (0.0,))


def test_lanes_over_their_total_are_still_capped_by_it(pacer: Pacer) -> None:
    """Lanes that add up to more than the total (a direct database update): the total's
    bucket caps the campaign's slots ahead as it does those now (40/s, a burst of 16, the
    two lanes' together)."""
    grant = pacer.take(905, "campaign", 100, Rates(RATE, 40.0), RATE, ahead=0.25)
    assert grant.slots == 16 + 10 == len(grant.starts)
    # Each slot as late as the later of its two buckets makes it.
    lane = [max(0, k - 7) / RATE for k in range(26)]
    total = [max(0, k - 15) / 40.0 for k in range(26)]
    expected = [max(pair) for pair in zip(lane, total, strict=True)]
    assert grant.starts == pytest.approx(expected, abs=1e-5)


def test_without_ahead_a_slot_is_granted_as_soon_as_it_is_free(pacer: Pacer) -> None:
    """A reply's drain takes no slot ahead: one is granted the moment it is free."""
    rates = Rates(lane=RATE, total=RATE)
    grant = pacer.take(902, "reply", 100, rates, 0.0)
    assert (grant.slots, grant.starts) == (8, (0.0,) * 8)
    again = pacer.take(902, "reply", 100, rates, 0.0)
    assert again.slots == 0 and 0 < again.wait <= 1 / RATE + 1e-6


def test_fewer_due_than_half_are_granted_together(pacer: Pacer) -> None:
    rates = Rates(lane=RATE, total=RATE)
    pacer.take(903, "campaign", 28, rates, 0.0, ahead=0.25)  # every slot there is, taken
    again = pacer.take(903, "campaign", 3, rates, 0.0, ahead=0.25, gather=True)
    assert again.slots == 0 and 0 < again.wait <= 3 / RATE + 1e-6


def test_a_call_not_yet_due_is_not_begun_and_is_given_back_when_abandoned() -> None:
    started: list[str] = []
    first_called = threading.Event()

    def send(prepared: Any) -> Any:
        started.append((prepared, time.monotonic()))
        first_called.set()
        return f"answer to {prepared}"

    calls = InFlight(4, "test-pacing-ahead")
    try:
        soon = time.monotonic() + 0.05
        batch: Any = ["soon", "later"]
        calls.submit(batch, send, [soon, soon + 3600])
        assert len(calls) == 2 and calls.free == 2
        assert calls.wait(None) == ["answer to soon"]  # started as it fell due
        ended, unsent = calls.abandon()
    finally:
        calls.close()

    assert first_called.is_set()
    assert [name for name, _ in started] == ["soon"]
    assert started[0][1] >= soon  # not before its start
    assert (ended, unsent) == ([], ["later"])


def test_a_pacing_wait_collects_the_calls_that_fall_due_within_it_together() -> None:
    """`wait(every=True)`, a drain's pacing wait: the calls due meanwhile are started at
    their time and all their ends come back at once, for one record."""
    calls = InFlight(4, "test-pacing-ahead")
    try:
        now = time.monotonic()
        batch: Any = ["now", "soon"]
        calls.submit(batch, lambda prepared: f"answer to {prepared}", [now, now + 0.05])
        ended = calls.wait(60.0, every=True)
    finally:
        calls.close()
    assert ended == ["answer to now", "answer to soon"]
    assert len(calls) == 0


@pytest.mark.parametrize(
    ("ahead", "most_claims", "most_at_once"),
    [
        # Slot by slot (before), a drain below the worker's speed claimed the one or two
        # slots freed during its last step: 48 claims here. By the default, half the
        # burst (4) at least: 28. Granted 0.25 s ahead, 28 at the start and at least
        # 14 a step after: 9. A tenth of a second holds the burst (8) and 8 more, with 4
        # of jitter; were the calls not held for their slots, a claim's 28 at once.
        (0.0, 160 // 4, 8 + 8 + 4),
        (0.25, 160 // 8, 8 + 8 + 4),
    ],
)
def test_a_drain_at_80_a_second_claims_many_a_step_and_keeps_the_pace(
    env: Env, ahead: float, most_claims: int, most_at_once: int
) -> None:
    number = env.number(rate_limit_mps=None, statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, reply_rate=20.0, campaign_rate=RATE, total_rate=RATE + 20.0)
    ids = [env.send(number, f"1555720{n:04d}", lane="campaign") for n in range(160)]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "ahead", px=60_000)
    config = dataclasses.replace(env.config, pacing_ahead=ahead)

    summary = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign").run(
        "ahead"
    )

    assert "160 accepted" in summary
    with env.db.transaction() as session:
        sent = session.scalar(
            select(func.count()).where(Message.identity_id == identity_id, Message.status == "sent")
        )
        # A claim stamps its attempts with its own time: one time per claim.
        claims = session.scalar(
            select(func.count(func.distinct(Attempt.started_at))).where(Attempt.message_id.in_(ids))
        )
    assert sent == 160
    assert claims is not None and claims <= most_claims, claims
    times = sorted(a["time"] for a in env.accepted(number))
    assert len(times) == 160
    # The pace at the provider: the rate and its burst in any second, with what 0.25 s of
    # a loaded machine's uneven delays carries over (as test_drains allows).
    assert busiest_second(times) <= RATE + burst_of(RATE) + RATE * 0.25
    assert busiest_window(times, 0.1) <= most_at_once, busiest_window(times, 0.1)


def busiest_window(times: list[float], seconds: float) -> int:
    """The most receipts in any window of `seconds` starting at a receipt."""
    return max(sum(1 for t in times if start <= t < start + seconds) for start in times)


def test_a_drain_with_fewer_call_threads_than_a_batch_waits_for_them(env: Env) -> None:
    """Four call threads, 200 ms answers, 28 slots granted at the start: the calls waiting
    for a thread or a slot fill every thread. The drain waits for one to free up; it
    asked the pacer for no slots, again and again, until one did (every ask a step of
    reads and a "pacing wait")."""
    number = env.number(rate_limit_mps=None, statuses=[], answer_delay_ms=200)
    identity_id = number["identity_id"]
    env.set_rates(number, reply_rate=20.0, campaign_rate=RATE, total_rate=RATE + 20.0)
    ids = [env.send(number, f"1555730{n:04d}", lane="campaign") for n in range(40)]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "few", px=60_000)
    config = dataclasses.replace(env.config, drain_concurrency=4)

    drain = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign")
    summary = drain.run("few")

    assert "40 accepted" in summary
    assert [env.message(i).status for i in ids] == ["sent"] * 40
    # 40 sends through 4 threads of 200 ms take 2 s: a few dozen waits for slots at most.
    assert drain.outcomes["pacing waits"] < 40, drain.outcomes


@pytest.mark.parametrize("bad", ["-0.1", "2.5", "soon"])
def test_a_bad_pacing_horizon_is_refused_at_start(bad: str) -> None:
    with pytest.raises(ConfigError, match="RATCHET_PACING_AHEAD"):
        Config.from_env({"SECRET_KEY": "x" * 20, "RATCHET_PACING_AHEAD": bad})
    assert Config.from_env({"SECRET_KEY": "x" * 20, "RATCHET_PACING_AHEAD": "0"}).pacing_ahead == 0
