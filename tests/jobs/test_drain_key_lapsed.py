"""A drain job whose key lapsed while it waited in its queue takes the key back and drains
its shard, unless another drain holds the key (`renew_drain` in `jobs/queues.py`); a drain
letting go of a key no one holds reads the dirty flag as its own (`release_drain`).

Found by `bench/send_rate.py --latency --messages 12000`: one worker ran an identity's
eight shards in turn, each drain its whole slice, and the last shard's job, rung with the
others, waited 29 s for the worker while its key lasted 20 s. It found the key gone, took
it for another drain's, and stopped: 1,484 messages queued with no drain rung, until the
sweeper's next pass."""

from __future__ import annotations

from redis import Redis

from jobs.drain import Drain
from jobs.drain import drain as drain_job
from jobs.pacing import Pacer
from jobs.queues import drain_keys, release_drain, ring_drain

from .conftest import Env


def _campaign(env: Env, recipients: list[str]) -> tuple[int, list[int], Redis, str]:
    """An identity with these recipients' campaign messages queued: its id, the messages,
    the Redis its drains use, and its campaign drain's key."""
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    ids = [env.send(number, to, lane="campaign") for to in recipients]
    redis = env.app.extensions["ratchet.redis"]
    return identity_id, ids, redis, drain_keys(identity_id, "campaign")[0]


def _run(env: Env, redis: Redis, identity_id: int, token: str) -> str:
    drain = Drain(env.db, env.box, env.config, redis, Pacer(redis), identity_id, "campaign")
    return drain.run(token)


def test_a_drain_whose_key_lapsed_in_the_queue_takes_it_back_and_drains(env: Env) -> None:
    identity_id, ids, redis, pending = _campaign(env, [f"1555720{n:04d}" for n in range(5)])
    # Rung: the key set with the job's token, the job queued; then the key lapses while
    # the job waits behind other drains.
    assert ring_drain(drain_job, identity_id, "campaign", 60_000, redis)
    token = redis.get(pending)
    assert token is not None
    redis.delete(pending)

    summary = _run(env, redis, identity_id, token.decode())

    assert "5 accepted" in summary, summary
    assert [env.message(i).status for i in ids] == ["sent"] * 5
    assert redis.get(pending) is None  # taken back, then released as it ended


def test_a_drain_whose_key_another_drain_holds_still_stops(env: Env) -> None:
    identity_id, [first], redis, pending = _campaign(env, ["15557300000"])
    redis.set(pending, "theirs", px=60_000)

    summary = _run(env, redis, identity_id, "mine")

    assert "another drain holds" in summary, summary
    assert env.message(first).status == "queued"
    assert redis.get(pending) == b"theirs"


def test_a_ring_while_the_key_was_held_is_not_lost_when_the_key_lapses_before_release(
    env: Env,
) -> None:
    """A drain found nothing due; a message was rung meanwhile (the key held, so only the
    flag was set); the drain was stopped past its key's lease, and let go after. The flag
    is read as the holder's: the drain rings again (it used to find the key gone, read
    nothing, and leave the message to the sweeper)."""
    redis = env.app.extensions["ratchet.redis"]
    pending, dirty = drain_keys(7, "campaign")
    redis.set(pending, "held", px=60_000)
    redis.set(dirty, "1", px=60_000)  # the ring, while the key was held
    redis.delete(pending)  # the lease lapsed under a SIGSTOP, no one took it

    assert release_drain(redis, 7, "campaign", "held") is True
    assert redis.get(dirty) is None


def test_a_ring_that_wins_a_lapsed_key_stops_the_stale_drain(env: Env) -> None:
    """The key lapsed and a ring took it for a new job before the stale drain's next renew:
    the new job's drain runs the shard, the stale one stops and leaves its key alone."""
    identity_id, [first], redis, pending = _campaign(env, ["15557400000"])
    redis.delete(pending)
    assert ring_drain(drain_job, identity_id, "campaign", 60_000, redis)
    fresh = redis.get(pending)

    summary = _run(env, redis, identity_id, "stale")

    assert "another drain holds" in summary, summary
    assert env.message(first).status == "queued"  # the new job's, still to run
    assert redis.get(pending) == fresh
