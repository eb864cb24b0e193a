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
