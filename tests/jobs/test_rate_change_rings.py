"""New rates ring the drains they concern: a rate change can change how many shards a
lane has (`app/shards.py`), and the messages now in a shard nobody rang must not wait for
the sweeper's next pass. Both ways to change rates (the CLI and the identities page)
ring; here the sweeper never runs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker

from app.shards import shard_key_of, shard_of
from jobs.queues import queue_name

from .conftest import Env

LANE = "campaign"


def shards_on(env: Env, shard_rate: float) -> None:
    config = replace(env.config, shard_rate=shard_rate, shard_max=8)
    env.app.config["RATCHET"] = config
    env.config = config


def send_everything_rung(env: Env) -> None:
    """Run the lane's queued drains here until none is left (no sweeper, no scheduler)."""
    redis = Redis.from_url(env.config.redis_url)
    try:
        SimpleWorker([Queue(queue_name(LANE), connection=redis)], connection=redis).work(
            burst=True, with_scheduler=False
        )
    finally:
        redis.close()


def change_rates_with_the_cli(env: Env, number: dict[str, Any], campaign: str, total: str) -> None:
    identity = str(number["identity_id"])
    args = ["identity", "update", identity, "--campaign-rate", campaign, "--total-rate", total]
    result = env.app.test_cli_runner().invoke(args=args)
    assert result.exit_code == 0, result.output


def test_a_raised_rate_rings_the_new_shards_holding_messages(env: Env) -> None:
    shards_on(env, shard_rate=100.0)
    number = env.number(statuses=[], rate_limit_mps=None)
    env.set_rates(number, campaign_rate=50.0, total_rate=70.0)  # one shard
    people = [f"155593{n:05d}" for n in range(24)]
    assert {shard_of(shard_key_of(p), 4) for p in people} == {0, 1, 2, 3}
    ids = [env.send(number, person, lane=LANE) for person in people]  # each rings shard 0

    change_rates_with_the_cli(env, number, campaign="400", total="420")
    send_everything_rung(env)

    assert [env.message(i).status for i in ids] == ["sent"] * len(ids)
    assert sorted(a["to"] for a in env.accepted(number)) == sorted(people)


def test_a_lowered_rate_rings_the_shards_that_take_over_the_gone_ones(env: Env) -> None:
    shards_on(env, shard_rate=100.0)
    number = env.number(statuses=[], rate_limit_mps=None)
    env.set_rates(number, campaign_rate=400.0, total_rate=420.0)  # four shards
    people = [f"155594{n:05d}" for n in range(24)]
    assert {shard_of(shard_key_of(p), 4) for p in people} == {0, 1, 2, 3}
    ids = [env.send(number, person, lane=LANE) for person in people]
    redis = Redis.from_url(env.config.redis_url)
    try:
        redis.flushdb()  # the rings of the four shards are lost with the drain keys
    finally:
        redis.close()

    change_rates_with_the_cli(env, number, campaign="50", total="70")
    send_everything_rung(env)

    assert [env.message(i).status for i in ids] == ["sent"] * len(ids)
