"""Delivering status callbacks: one drain per endpoint, an RQ job on its own queue.

The outbox (`app/repo/callback_outbox.py`) is the truth; Redis only rings. A drain holds
its endpoint's key (like the send drains' `ring_drain`), then repeats: claim what is due
(at most `callback_concurrency`, each under a lease), POST each from a pool of threads,
record each answer in its own transaction. It stops when nothing is due, the endpoint is
disabled, or its slice ends. The sweeper rings every endpoint with something due on every
pass, so a lost ring, a Redis flush or a killed worker delays callbacks, never loses them.

Each POST: Standard Webhooks headers, the exact signed bytes, a total deadline
(`callback_timeout`), no redirects followed, the answer's body cut, the destination's
addresses checked again (a name re-pointed at a private address since it was registered).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from flask import current_app
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue
from sqlalchemy.exc import SQLAlchemyError

from app import instruments
from app.callback_signing import encode_body, headers
from app.callback_urls import CallbackUrlError, check_destination, parse_callback_url
from app.clock import utcnow
from app.config import Config
from app.crypto import SecretBox, get_box
from app.db import Database, get_db
from app.providers.http import TransportError, parse_retry_after, post_content
from app.providers.pinning import pinned
from app.repo import callback_outbox as outbox
from app.repo.callback_endpoints import get_endpoint, signing_secrets
from jobs.queues import QUEUE_PREFIX, get_redis

log = logging.getLogger(__name__)

QUEUE = f"{QUEUE_PREFIX}-callbacks"
# How much of a receiver's answer is read at all (the rest is never read).
MAX_ANSWER_BYTES = 64 * 1024
SLICE_SECONDS = 5.0
# A drain that finds nothing due looks again this often, for this long, before it exits:
# under a steady stream of changes one drain stays and takes each within a poll.
LINGER_SECONDS, LINGER_POLL = 1.0, 0.05
# Beyond the POST's own deadline, before a claimed row is due again (a killed worker).
LEASE_MARGIN = 30.0


@dataclass
class Pace:
    """At most `rate` POSTs start in any one second (a sliding window on the monotonic
    clock); a rate of 0 sets no limit. One drain per endpoint at a time, so its own count
    is the endpoint's."""

    rate: int
    starts: deque[float] = field(default_factory=deque)

    def free(self, now: float) -> int:
        if self.rate <= 0:
            return 1 << 30
        while self.starts and now - self.starts[0] >= 1.0:
            self.starts.popleft()
        return max(0, self.rate - len(self.starts))

    def took(self, now: float, count: int) -> None:
        if self.rate > 0:
            self.starts.extend([now] * count)

    def wait(self, now: float) -> float:
        """Seconds until a slot frees (0 when one is free)."""
        if self.free(now) > 0:
            return 0.0
        return max(0.0, self.starts[0] + 1.0 - now)


def callback_queue(redis: Redis | None = None) -> Queue:
    return Queue(QUEUE, connection=redis or get_redis())


def _keys(endpoint_id: int) -> tuple[str, str]:
    """(the pending drain's key, its dirty flag)."""
    return (
        f"{QUEUE_PREFIX}:callbacks:{endpoint_id}",
        f"{QUEUE_PREFIX}:callbacks-dirty:{endpoint_id}",
    )


def ring_endpoint(endpoint_id: int, config: Config, redis: Redis | None = None) -> bool:
    """Make sure a drain of this endpoint looks at the outbox after now, as `ring_drain`
    does for sends: mark it dirty (a drain running now looks again before it exits), and
    enqueue one if none is pending or running (its key, set only if absent). False, and
    logged, when Redis cannot be reached: the sweeper's pass rings it."""
    pending, dirty = _keys(endpoint_id)
    token = secrets.token_hex(8)
    lease_ms = int((SLICE_SECONDS + LINGER_SECONDS + config.callback_timeout + LEASE_MARGIN) * 1000)
    try:
        connection = redis or get_redis()
        pipe = connection.pipeline(transaction=True)
        pipe.set(dirty, "1", px=lease_ms)
        pipe.set(pending, token, nx=True, px=lease_ms)
        _, won = pipe.execute()
        if won:
            callback_queue(connection).enqueue(drain_callbacks, endpoint_id, token)
    except RedisError as exc:
        log.warning("could not ring the callbacks of endpoint %s: %s", endpoint_id, exc)
        return False
    return True


# Only the holder releases, and reads (and clears) the dirty flag.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return redis.call('GETDEL', KEYS[2])
end
return false
"""


def drain_callbacks(endpoint_id: int, token: str) -> str:
    """The RQ job: deliver, lingering a moment for more; then give the key back, and ring
    again if rung meanwhile (a change committed while it was finishing)."""
    config: Config = current_app.config["RATCHET"]
    redis = get_redis()
    rung = False
    try:
        with suppress(RedisError):
            redis.delete(_keys(endpoint_id)[1])
        sent = deliver_due(get_db(), get_box(), config, endpoint_id, utcnow, linger=LINGER_SECONDS)
    finally:
        with suppress(RedisError):  # else the key expires with its lease
            rung = bool(redis.eval(_RELEASE, 2, *_keys(endpoint_id), token))
    if rung:
        ring_endpoint(endpoint_id, config, redis)
    return f"endpoint {endpoint_id}: {sent} callbacks posted"


def deliver_due(
    db: Database,
    box: SecretBox,
    config: Config,
    endpoint_id: int,
    clock: Callable[[], datetime] = utcnow,
    *,
    slice_seconds: float = SLICE_SECONDS,
    linger: float = 0.0,
) -> int:
    """Post what is due for one endpoint until nothing has been for `linger` seconds, or
    the slice ends; returns how many POSTs were made. `clock()` gives the time (the tests
    pass theirs)."""
    lease = timedelta(seconds=config.callback_timeout + LEASE_MARGIN)
    ends = time.monotonic() + slice_seconds
    width = config.callback_concurrency
    pace = Pace(config.callback_rate)
    posted, stop = 0, False
    idle_since = time.monotonic()
    in_flight: dict[Future[outbox.Answer], outbox.Claimed] = {}
    with ThreadPoolExecutor(width, "callback") as pool:
        while True:
            # 1. Claim more while half the threads or more are free (or none is busy), so
            #    POSTs stay in flight without a barrier per batch and claims stay few.
            #    Never more than the endpoint's rate allows to start in a second.
            free = width - len(in_flight)
            allowed = min(free, pace.free(time.monotonic()))
            if not stop and time.monotonic() < ends and (free * 2 >= width or not in_flight):
                if allowed > 0:
                    claimed, url, keys = _claim(db, box, endpoint_id, clock(), allowed, lease)
                    if url is None:
                        stop = True
                    pace.took(time.monotonic(), len(claimed))
                    for callback in claimed:
                        in_flight[pool.submit(_post, config, callback, url or "", keys)] = callback
                    if claimed:
                        idle_since = time.monotonic()
                elif not in_flight:
                    time.sleep(min(pace.wait(time.monotonic()), 1.0))
                    idle_since = time.monotonic()  # held back by the rate, not idle
                    continue
            if not in_flight:
                lingered = time.monotonic() - idle_since >= linger
                if stop or time.monotonic() >= ends or lingered:
                    break
                time.sleep(LINGER_POLL)
                continue
            # 2. Record what has answered, in one transaction.
            timeout = LINGER_POLL if width > len(in_flight) else None
            done, _ = wait(list(in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
            if done:
                answered = [(in_flight.pop(future), future.result()) for future in done]
                posted += len(answered)
                stop = _record(db, config, endpoint_id, answered, clock()) or stop
    return posted


def _claim(
    db: Database,
    box: SecretBox,
    endpoint_id: int,
    now: datetime,
    limit: int,
    lease: timedelta,
) -> tuple[list[outbox.Claimed], str | None, list[str]]:
    """(claimed callbacks, the endpoint's URL, its secrets); no URL: gone or disabled."""
    with db.transaction() as session:
        endpoint = get_endpoint(session, None, endpoint_id)
        if endpoint is None or not endpoint.enabled:
            return [], None, []
        keys = signing_secrets(box, endpoint, now).secrets
        return outbox.claim_due(session, endpoint_id, now, limit, lease), endpoint.url, keys


def _record(
    db: Database,
    config: Config,
    endpoint_id: int,
    answered: list[tuple[outbox.Claimed, outbox.Answer]],
    now: datetime,
) -> bool:
    """Record answers together, the 2xx ones in three statements; True when one of them
    disabled the endpoint (or it is gone)."""
    disabled = None
    try:
        with db.transaction() as session:
            if not outbox.lock_endpoint(session, endpoint_id):
                return True  # deleted meanwhile, with its callbacks
            succeeded = [(c, a) for c, a in answered if a.is_success]
            outbox.record_delivered(session, endpoint_id, succeeded, now)
            for callback, answer in answered:
                if answer.is_success:
                    continue
                recorded = outbox.record_answer(
                    session,
                    callback,
                    endpoint_id,
                    answer,
                    now,
                    retry_window=timedelta(seconds=config.callback_retry_window),
                    disable_after=config.callback_disable_after,
                )
                disabled = disabled or recorded.disabled
    except SQLAlchemyError as exc:
        # The rows stay leased and go out again when their lease ends (same webhook-id).
        log.warning("callback answers of endpoint %s not recorded: %s", endpoint_id, exc)
        return True
    for callback, answer in answered:
        result = "delivered" if answer.is_success else "failed"
        instruments.CALLBACK_POSTS.labels(str(endpoint_id), result).inc()
        if not answer.is_success:
            log.info(
                "callback %s to endpoint %s (attempt %s) failed: %s",
                callback.webhook_id,
                endpoint_id,
                callback.attempt,
                answer.error or f"HTTP {answer.status}",
            )
    if disabled:
        log.warning("callback endpoint %s disabled: %s", endpoint_id, disabled)
    return disabled is not None


def _post(
    config: Config, callback: outbox.Claimed, endpoint_url: str, keys: list[str]
) -> outbox.Answer:
    url = callback.url or endpoint_url
    started = time.monotonic()
    body = encode_body(callback.payload)
    sent = headers(keys, callback.webhook_id, int(time.time()), body)
    try:
        allowed = config.callback_allow_hosts
        target = parse_callback_url(url, allowed)
        # Connect to the address just checked: a second lookup may answer another one.
        with pinned(target.host, check_destination(target, allowed)):
            deadline = started + config.callback_timeout
            answer = post_content(url, body, sent, deadline, MAX_ANSWER_BYTES)
    except CallbackUrlError as exc:
        return outbox.Answer(None, _ms(started), error=f"refused: {exc}")
    except TransportError as exc:
        return outbox.Answer(None, _ms(started), error=exc.description)
    retry_after = parse_retry_after(answer.headers.get("retry-after"))
    return outbox.Answer(answer.status, _ms(started), answer.text, retry_after=retry_after)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
