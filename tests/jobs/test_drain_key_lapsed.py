"""A drain job whose key lapsed while it waited in its queue takes the key back and drains
its shard, unless another drain holds the key (`renew_drain` in `jobs/queues.py`).

Found by `bench/send_rate.py --latency --messages 12000`: one worker ran an identity's
eight shards in turn, each drain its whole slice, and the last shard's job, rung with the
others, waited 29 s for the worker while its key lasted 20 s. It found the key gone, took
it for another drain's, and stopped: 1,484 messages queued with no drain rung, until the
sweeper's next pass."""

from __future__ import annotations

from jobs.drain import Drain
from jobs.drain import drain as drain_job
from jobs.pacing import Pacer
from jobs.queues import drain_keys, ring_drain

from .conftest import Env


def test_a_drain_whose_key_lapsed_in_the_queue_takes_it_back_and_drains(env: Env) -> None:
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    ids = [env.send(number, f"1555720{n:04d}", lane="campaign") for n in range(5)]
    redis = env.app.extensions["ratchet.redis"]
    pending, _ = drain_keys(identity_id, "campaign")
    # Rung: the key set with the job's token, the job queued; then the key lapses while
    # the job waits behind other drains.
    assert ring_drain(drain_job, identity_id, "campaign", 60_000, redis)
    token = redis.get(pending)
    assert token is not None
    redis.delete(pending)

    drain = Drain(env.db, env.box, env.config, redis, Pacer(redis), identity_id, "campaign")
    summary = drain.run(token.decode())

    assert "5 accepted" in summary, summary
    assert [env.message(i).status for i in ids] == ["sent"] * 5
    assert redis.get(pending) is None  # taken back, then released as it ended


def test_a_drain_whose_key_another_drain_holds_still_stops(env: Env) -> None:
    number = env.number(statuses=[])
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    first = env.send(number, "15557300000", lane="campaign")
    redis = env.app.extensions["ratchet.redis"]
    pending, _ = drain_keys(identity_id, "campaign")
    redis.set(pending, "theirs", px=60_000)

    drain = Drain(env.db, env.box, env.config, redis, Pacer(redis), identity_id, "campaign")
    summary = drain.run("mine")

    assert "another drain holds" in summary, summary
    assert env.message(first).status == "queued"
    assert redis.get(pending) == b"theirs"
