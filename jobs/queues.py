"""The one place that builds the Redis connection and the RQ queues.

Redis is only the doorbell: a lost or repeated ring is harmless because every job
re-reads its row and the sweeper re-rings what is due.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from flask import Flask, current_app
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue

from app.clock import clock_offset

log = logging.getLogger(__name__)

LANES = ("reply", "campaign")
QUEUE_PREFIX = "ratchet"
# A ring that cannot reach Redis must not hold an API request for long.
SOCKET_TIMEOUT = 2.0


def queue_name(lane: str) -> str:
    if lane not in LANES:
        raise ValueError(f"unknown lane {lane!r}; expected one of {', '.join(LANES)}")
    return f"{QUEUE_PREFIX}-{lane}"


def build_redis(url: str) -> Redis:
    return Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT)


def init_app(app: Flask, redis: Redis | None = None) -> None:
    app.extensions["ratchet.redis"] = redis or build_redis(app.config["RATCHET"].redis_url)


def get_redis() -> Redis:
    redis: Redis = current_app.extensions["ratchet.redis"]
    return redis


def get_queue(lane: str, redis: Redis | None = None) -> Queue:
    return Queue(queue_name(lane), connection=redis or get_redis())


def ring(func: Callable[..., Any], lane: str, *args: Any, at: datetime | None = None) -> bool:
    """Enqueue `func(*args)` on the lane's queue (at a time, if given).

    Returns False, and logs, when Redis cannot be reached: the row is already committed
    and the sweeper will ring it later.
    """
    try:
        queue = get_queue(lane)
        if at is None:
            queue.enqueue(func, *args)
        else:
            queue.enqueue_at(whole_second_after(at), func, *args)
    except RedisError as exc:
        log.warning("could not ring %s%r on %s: %s", func.__name__, args, lane, exc)
        return False
    return True


# A drain's claim on its identity and lane: set only if absent, so one drain is pending or
# running per identity and lane; renewed while it runs, expiring like a lease.
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
# Only the holder releases, and only the holder reads (and clears) the dirty flag: a drain
# whose key expired and was taken over must not swallow a ring meant for the new holder.
# A key no one holds (it lapsed, say under a SIGSTOP) is released as the holder's: a ring
# that came while it was held only set the flag, and the drain letting go must ring again.
_RELEASE = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or not holder then
  redis.call('DEL', KEYS[1])
  return redis.call('GETDEL', KEYS[2])
end
return false
"""


def drain_keys(identity_id: int, lane: str, shard: int = 0) -> tuple[str, str]:
    """(the pending drain's key, its dirty flag), for one shard of the lane
    (`app/shards.py`). Shard 0's keep the names they had before lanes had shards."""
    tail = f"{identity_id}:{lane}" if shard == 0 else f"{identity_id}:{lane}:{shard}"
    return f"{QUEUE_PREFIX}:drain:{tail}", f"{QUEUE_PREFIX}:drain-dirty:{tail}"


def ring_drain(
    drain: Callable[..., Any],
    identity_id: int,
    lane: str,
    lease_ms: int,
    redis: Redis | None = None,
    shard: int = 0,
) -> bool:
    """Make sure a drain of this identity and lane (its `shard` of it) will look at the
    database after now.

    1. Mark the pair dirty: a drain running now re-checks before it exits.
    2. If no drain is pending or running (the key is absent), take the key with a fresh
       token and enqueue one. Both in one round trip.
    Returns False, and logs, when Redis cannot be reached (the sweeper rings later).
    """
    pending, dirty = drain_keys(identity_id, lane, shard)
    token = secrets.token_hex(8)
    try:
        connection = redis or get_redis()
        pipe = connection.pipeline(transaction=True)
        pipe.set(dirty, "1", px=lease_ms)
        pipe.set(pending, token, nx=True, px=lease_ms)
        _, won = pipe.execute()
        if won:
            args = (identity_id, lane, token) if shard == 0 else (identity_id, lane, token, shard)
            get_queue(lane, connection).enqueue(drain, *args)
    except RedisError as exc:
        log.warning("could not ring the %s drain of identity %s: %s", lane, identity_id, exc)
        return False
    return True


def renew_drain(
    redis: Redis, identity_id: int, lane: str, token: str, lease_ms: int, shard: int = 0
) -> bool:
    """Keep the drain's claim; False if it expired and another drain holds it now.

    A key no drain holds (it expired, another drain took it and let go, or Redis lost
    it) is taken back: no other drain runs the shard. A job can wait in its queue longer
    than the key it was rung with lasts (one worker running eight shards' drains in turn,
    each its whole slice); it used to find its key gone and stop, stranding the shard
    until the sweeper rang it again."""
    pending, _ = drain_keys(identity_id, lane, shard)
    return bool(redis.eval(_RENEW, 1, pending, token, lease_ms))


def release_drain(redis: Redis, identity_id: int, lane: str, token: str, shard: int = 0) -> bool:
    """Give the claim up; True if something was rung meanwhile (the dirty flag was set)."""
    pending, dirty = drain_keys(identity_id, lane, shard)
    return bool(redis.eval(_RELEASE, 2, pending, dirty, token))


def clear_dirty(redis: Redis, identity_id: int, lane: str, shard: int = 0) -> None:
    """Before a drain looks at the database: a ring after this sets the flag again."""
    redis.delete(drain_keys(identity_id, lane, shard)[1])


def is_dirty(redis: Redis, identity_id: int, lane: str, shard: int = 0) -> bool:
    """Rung since the drain last cleared the flag: something new may be due."""
    return bool(redis.exists(drain_keys(identity_id, lane, shard)[1]))


def whole_second_after(at: datetime) -> datetime:
    """RQ's scheduler keeps times to whole seconds, cutting the fraction off, so a job rung
    for 10.7 s would run from 10.0 s: before its message is due. Round up instead.

    `at` is on the database's clock, as every due time is; RQ's scheduler compares with
    its process's wall clock, so it is given the time as this process's wall clock shows
    it, to the whole second (the offset's last milliseconds are noise, and would push
    every whole-second time a second later). A drain rung up to half a second early
    claims nothing and rings itself again; another worker's scheduler, on a clock of its
    own, may ring it earlier (the same) or later (the sweeper rings what is due)."""
    at -= timedelta(seconds=round(clock_offset().total_seconds()))
    if at.microsecond == 0:
        return at
    return at.replace(microsecond=0) + timedelta(seconds=1)


def is_reachable(redis: Redis | None = None) -> bool:
    try:
        return bool((redis or get_redis()).ping())
    except RedisError:
        return False


# A drain rung to the back of the queue (a slice's end) waits there a moment even when a
# worker is idle: a job still queued after this long has no worker to take it. Without the
# grace, a drain short of a slot at that moment handed its worker back and came back
# through RQ's scheduler, a whole second or more later (likely the 1 s gap, at a slice's
# end, in a 10/s identity's sends in bench/pacing.py on 2026-12-03).
IDLE_WORKER_GRACE = 0.05


def others_waiting(
    redis: Redis,
    lane: str,
    grace: float = IDLE_WORKER_GRACE,
    *,
    within: float,
    identity_id: int | None = None,
) -> bool:
    """Other drains queued for this lane's workers and still there after a moment (no
    idle worker took them): a drain hands its worker back to them. The moment is `grace`,
    at most `within` (the wait the drain has ahead anyway). The drains of `identity_id`'s
    other shards do not count: they wait for the same pacing budget, so handing the worker
    to them only sends this one through RQ's scheduler, a whole second later."""
    try:
        queue = get_queue(lane, redis)
        if queue.count == 0:
            return False
        time.sleep(min(grace, within))
        if identity_id is None or queue.count > SIBLINGS_LOOKED_AT:
            return queue.count > 0
        return any(not _drain_of(job, identity_id) for job in queue.get_jobs())
    except Exception:
        return False


# At most this many queued jobs are read to tell a number's own shards from other drains;
# a longer queue is taken as holding others.
SIBLINGS_LOOKED_AT = 64


def _drain_of(job: Any, identity_id: int) -> bool:
    """A drain (or its scheduled wake) of this identity, of any shard."""
    return bool(
        job is not None
        and job.func_name in ("jobs.drain.drain", "jobs.drain.wake_drain")
        and job.args
        and job.args[0] == identity_id
    )
