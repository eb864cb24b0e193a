"""Two holes an adversarial review of the shards found, each closed:

1. A row finished before migration 0022 keeps `shard_key` 0. A provider's later `failed`
   (sent -> failed is allowed) and a requeue put it back in the queue: it joins its
   recipient's shard again, so one person's messages still meet in one shard.
2. The shard count is each process's own reading of `RATCHET_SHARD_RATE` and
   `RATCHET_SHARD_MAX`. A sweeper counting more shards than the workers rings drains the
   workers hold to be gone: such a drain rings the shards that exist before it stops, so
   their messages are sent, not stranded.
"""

from __future__ import annotations

from redis import Redis
from rq import Queue, SimpleWorker
from sqlalchemy import text

from app.clock import utcnow
from app.repo.requeues import requeue_message
from app.repo.shards import message_shard
from app.shards import shard_key_of, shard_of
from jobs.queues import queue_name
from jobs.sweep import sweep_once

from .conftest import Env
from .shard_switch import shard_on

LANE = "campaign"


def people_outside_shard_0(prefix: str, count: int) -> list[str]:
    numbers = (f"{prefix}{n:05d}" for n in range(500))
    return [p for p in numbers if shard_of(shard_key_of(p), 4) != 0][:count]


def test_a_requeued_row_from_before_the_shards_joins_its_recipients_shard(env: Env) -> None:
    shard_on(env, shard_rate=100.0)
    number = env.number(statuses=[], rate_limit_mps=None)
    env.set_rates(number, campaign_rate=400.0, total_rate=400.0)  # four shards
    [person] = people_outside_shard_0("155591", 1)
    message_id = env.send(number, person, lane=LANE)
    with env.db.transaction() as session:
        # What 0022 leaves on a row that was `sent` when it ran, then the provider's
        # later `failed` webhook.
        session.execute(
            text("UPDATE messages SET shard_key = 0, status = 'failed' WHERE id = :id"),
            {"id": message_id},
        )
    with env.db.transaction() as session:
        requeue_message(session, message_id, utcnow(), actor="test", force=True, reason="test")
    with env.db.transaction() as session:
        assert message_shard(session, message_id, env.config) == shard_of(shard_key_of(person), 4)


def send_after_a_flush(env: Env, sweeper_shards: int, worker_shards: int) -> list[str]:
    """Messages outside shard 0, their rings lost; the sweeper reads `sweeper_shards` as
    the most shards, the workers `worker_shards`. What became of each."""
    shard_on(env, shard_rate=100.0, shard_max=sweeper_shards)
    number = env.number(statuses=[], rate_limit_mps=None)
    env.set_rates(number, campaign_rate=400.0, total_rate=400.0)
    ids = [env.send(number, p, lane=LANE) for p in people_outside_shard_0("155592", 6)]
    redis = Redis.from_url(env.config.redis_url)
    queue = Queue(queue_name(LANE), connection=redis)
    redis.flushdb()  # the API's rings are lost
    sweeper_config = env.config
    shard_on(env, shard_rate=100.0, shard_max=worker_shards)  # the workers' own settings
    try:
        for _ in range(3):
            sweep_once(env.db, sweeper_config, utcnow())
            SimpleWorker([queue], connection=redis).work(burst=True, with_scheduler=False)
    finally:
        redis.close()
    return [env.message(i).status for i in ids]


def test_a_sweeper_counting_more_shards_than_the_workers_strands_nothing(env: Env) -> None:
    assert send_after_a_flush(env, sweeper_shards=4, worker_shards=1) == ["sent"] * 6


def test_the_same_settings_everywhere_send_them_too(env: Env) -> None:
    assert send_after_a_flush(env, sweeper_shards=4, worker_shards=4) == ["sent"] * 6
