"""Per-tenant intake limits in Redis: requests per second, and a short-lived count of the
messages a tenant has waiting (docs/api.md, "Limits").

The rate is one GCRA bucket per tenant (as `jobs/pacing.py` paces identities), on Redis's
own clock (`TIME`), so every web process on every machine shares one budget whatever their
clocks say. The burst is one second of the rate (at least one request).

The waiting count is the database's (`app/repo/intake.py`), kept here for at most a second
so a flood of requests costs one count a second, not one each; every message accepted
meanwhile adds one to it, so a burst cannot overshoot the limit by a second's worth.

Redis is a doorbell here too: unreachable, the rate is not enforced (the request goes on,
and a warning is logged) and the waiting count is read from the database each time.
"""

from __future__ import annotations

import hashlib
import math

from redis import Redis
from redis.exceptions import NoScriptError

# KEYS: the tenant's bucket. ARGV: interval and burst (microseconds, cells).
# Returns microseconds to wait before this request would fit; 0 when it was taken.
_TAKE_ONE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local fits_at = tat - (burst - 1) * interval
if now < fits_at then return string.format('%.0f', fits_at - now) end
tat = tat + interval
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
return '0'
"""

# KEYS: the cached count. Adds one only while it is cached (a missing key stays missing:
# the next request counts afresh).
_ADD_ONE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCR', KEYS[1]) end
return -1
"""

WAITING_CACHE_MS = 1000
_TAKE_ONE_SHA = hashlib.sha1(_TAKE_ONE.encode()).hexdigest()


def rate_key(tenant_id: int) -> str:
    return f"ratchet:intake:rate:{tenant_id}"


def waiting_key(tenant_id: int) -> str:
    return f"ratchet:intake:waiting:{tenant_id}"


def take_request(redis: Redis, tenant_id: int, per_second: float) -> float:
    """Take one request from the tenant's budget: 0.0 if taken, else seconds to wait."""
    interval = max(1, round(1_000_000 / per_second))
    burst = max(1, math.floor(per_second))
    try:  # by its digest: a flood of refusals should not send the script each time
        wait = redis.evalsha(_TAKE_ONE_SHA, 1, rate_key(tenant_id), interval, burst)
    except NoScriptError:  # a new or flushed Redis: send it once
        wait = redis.eval(_TAKE_ONE, 1, rate_key(tenant_id), interval, burst)
    return int(wait) / 1_000_000


def cached_waiting(redis: Redis, tenant_id: int) -> int | None:
    raw = redis.get(waiting_key(tenant_id))
    return int(raw) if raw is not None else None


def cache_waiting(redis: Redis, tenant_id: int, count: int) -> None:
    redis.set(waiting_key(tenant_id), count, px=WAITING_CACHE_MS)


def add_waiting(redis: Redis, tenant_id: int) -> None:
    """A message was accepted: one more waiting, if the count is cached."""
    redis.eval(_ADD_ONE, 1, waiting_key(tenant_id))


class Refusals:
    """This process's memory of its refusals: until when each tenant's next request cannot
    fit its rate, so a flood past a limit costs Redis one call per request that fits, not
    one per request refused.

    Exact, never stricter than Redis: a tenant's bucket only moves forward (a refused
    request takes nothing; an accepted one puts the next fit later), so once Redis said
    "not for `wait` seconds" every request at that rate before then is refused there too.
    The wait counts from when the question was asked, before Redis read its clock, so the
    process stops refusing no later than Redis would. Kept per rate: a changed limit is
    asked afresh. The time is the caller's (a monotonic clock).
    """

    MOST = 10_000

    def __init__(self) -> None:
        self._until: dict[int, tuple[float, float]] = {}

    def remaining(self, tenant_id: int, per_second: float, now: float) -> float:
        """Seconds this tenant's requests are known not to fit at `per_second`; 0.0: ask."""
        known = self._until.get(tenant_id)
        if known is None or known[0] != per_second or known[1] <= now:
            return 0.0
        return known[1] - now

    def note(self, tenant_id: int, per_second: float, asked_at: float, wait: float) -> None:
        """Redis answered `wait` (0.0: taken) to a question asked at `asked_at`."""
        if wait <= 0:
            self._until.pop(tenant_id, None)
            return
        if len(self._until) >= self.MOST:
            self._until.clear()  # many tenants refused at once: start again, not grow
        self._until[tenant_id] = (per_second, asked_at + wait)
