"""The one place that builds the Redis connection and the RQ queues.

Redis is only the doorbell: a lost or repeated ring is harmless because every job
re-reads its row and the sweeper re-rings what is due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from flask import Flask, current_app
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue

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


def whole_second_after(at: datetime) -> datetime:
    """RQ's scheduler keeps times to whole seconds, cutting the fraction off, so a job rung
    for 10.7 s would run from 10.0 s: before its message is due. Round up instead."""
    if at.microsecond == 0:
        return at
    return at.replace(microsecond=0) + timedelta(seconds=1)


def is_reachable(redis: Redis | None = None) -> bool:
    try:
        return bool((redis or get_redis()).ping())
    except RedisError:
        return False
