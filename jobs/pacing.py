"""Pacing per sending identity, shared by every worker on every machine (DESIGN section 7).

Each identity has a reply rate, a campaign rate and a total cap. A drain asks for as many
slots as it has due messages; one Lua script, on Redis's own clock (`TIME`), grants as many
as its lane's bucket (and, where needed, the identity's total bucket) allows now, or for a
campaign a little ahead, and says when the next one frees up. The buckets are GCRA (the
generic cell rate algorithm): a bucket is one number, the theoretical arrival time of the
next cell, so a grant of k cells is O(1), and in any window of length W no more than
`rate x W + burst` cells are granted.

Why not the `limits` library: it passes the client's clock into its script (machines'
clocks differ) and takes a cost all-or-nothing, where a drain needs "as many as are free now,
and when is the next".

A reply never waits for a slot because of campaigns: the CLI keeps the two lane rates within
the total, and then the two lanes' buckets hold the total by themselves (their rates and
bursts add up to no more than its own), so only the lane's bucket is taken from. Should the
lanes add up to more (a direct database update), the total's bucket is taken from too; its
burst is at least the two lanes' bursts together, so one lane cannot empty it while the
other has room, though a campaign's slots granted ahead may then hold a reply back.

The provider's own rate-limit answers (130429, 80007, 4, Twilio's 20429) slow the identity:
its rates are halved for a minute (halved again if it happens again meanwhile, down to an
eighth), then recover. A pair limit (131056) holds that one recipient for 6 s, then paces it
to one send per 6 s for a minute after its last pair limit, without slowing anyone else.
Both live in Redis with an expiry: a flush just ends them early.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from app.providers.base import FailureClass, SendResult

log = logging.getLogger(__name__)

# KEYS: the buckets. ARGV: want, at least (fewer to grant: none), how far ahead a slot may
# be granted (microseconds), then per bucket its interval (microseconds) and burst (at least
# `at least`). Returns {granted, wait in microseconds until `at least` more could be granted,
# then each granted slot's start, in microseconds from now (0: now)}.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local want = tonumber(ARGV[1])
local least = tonumber(ARGV[2])
local ahead = tonumber(ARGV[3])
local grant = want
local tats = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i + 2])
  local burst = tonumber(ARGV[2 * i + 3])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  tats[i] = tat
  local free = math.floor((now + ahead + (burst - 1) * interval - tat) / interval) + 1
  if free < 0 then free = 0 end
  if free < grant then grant = free end
end
if grant < least then grant = 0 end
local answer = {grant, '0'}
for k = 0, grant - 1 do answer[k + 3] = 0 end
local wait = 0
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i + 2])
  local burst = tonumber(ARGV[2 * i + 3])
  for k = 0, grant - 1 do
    local start = tats[i] + (k - burst + 1) * interval - now
    if start > answer[k + 3] then answer[k + 3] = start end
  end
  local tat = tats[i] + grant * interval
  if grant > 0 then
    redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX',
               math.ceil((tat - now) / 1000) + 1000)
  end
  local w = tat + (least - burst) * interval - ahead - now
  if w > wait then wait = w end
end
answer[2] = string.format('%.0f', wait)
for k = 0, grant - 1 do answer[k + 3] = string.format('%.0f', answer[k + 3]) end
return answer
"""

# KEYS: the identity's slow-down factor. ARGV: its floor, how long it lasts (ms). Halves
# the factor in one step, so two rate-limit answers at once halve it twice, not once.
_SLOW_DOWN = """
local factor = tonumber(redis.call('GET', KEYS[1]) or '1') / 2
if factor < tonumber(ARGV[1]) then factor = tonumber(ARGV[1]) end
redis.call('SET', KEYS[1], tostring(factor), 'PX', ARGV[2])
return tostring(factor)
"""

# The pair limit, on Redis's clock (microseconds). KEYS: the identity's recipients under a
# pair limit now (member -> when the next send to them may go) and those paced after one
# (member -> until when). ARGV: `read` | `limited` | `sent`, the spacing and how long a
# recipient stays paced (microseconds), then recipients.
# read:    {recipients not to be sent to now, recipients paced but free now, microseconds
#          until the first of the former is free (-1: none)}
# limited: a pair-limit answer: no send to them for the spacing, and paced for a while
# sent:    sends to them just claimed: those paced wait the spacing before the next
_PAIRS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local spacing = tonumber(ARGV[2])
local paced_for = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[1] == 'read' then
  local blocked = redis.call('ZRANGE', KEYS[1], 0, -1)
  local free = {}
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if not redis.call('ZSCORE', KEYS[1], member) then table.insert(free, member) end
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = -1
  if first[2] then wait = tonumber(first[2]) - now end
  return {blocked, free, string.format('%.0f', wait)}
end
for i = 4, #ARGV do
  local member = ARGV[i]
  if ARGV[1] == 'limited' then
    redis.call('ZADD', KEYS[2], string.format('%.0f', now + paced_for), member)
    redis.call('ZADD', KEYS[1], string.format('%.0f', now + spacing), member)
  elseif redis.call('ZSCORE', KEYS[2], member) then
    redis.call('ZADD', KEYS[1], string.format('%.0f', now + spacing), member)
  end
end
local ttl = math.ceil((spacing + paced_for) / 1000) + 1000
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return {{}, {}}
"""

SLOWEST = 0.125


@dataclass(frozen=True, slots=True)
class RecipientPaces:
    """An identity's recipients under the provider's pair limit (131056): `blocked` may not
    be sent to now; `paced` may, one message each per batch, each send starting the
    spacing again."""

    blocked: list[str]
    paced: list[str]
    next_free: float | None = None  # seconds until the first blocked one may be sent to


@dataclass(frozen=True, slots=True)
class Rates:
    """Messages per second: the lane's own rate and the identity's total cap."""

    lane: float
    total: float


@dataclass(frozen=True, slots=True)
class Grant:
    slots: int
    wait: float  # seconds until the next slot (with `gather`: the next batch) is free
    # Each slot's start, in seconds from the grant (0.0: now); one per slot.
    starts: tuple[float, ...] = ()


MIN_BURST = 2


def _bucket(rate: float, burst_seconds: float) -> tuple[int, int]:
    """(interval in microseconds, burst in cells) for a rate.

    At least two cells: a drain that came back a little late for its slot (its batch took
    longer than one interval) may take two, so the rate it keeps is the one configured
    rather than the one its own latency allows."""
    interval = max(1, round(1_000_000 / rate))
    return interval, max(MIN_BURST, math.ceil(rate * burst_seconds))


class Pacer:
    """The identity buckets in one Redis, for every worker process."""

    def __init__(
        self,
        redis: Redis,
        burst_seconds: float = 0.1,
        slowdown_seconds: float = 60.0,
        pair_seconds: float = 6.0,
    ) -> None:
        self.redis = redis
        self.burst_seconds = burst_seconds
        self.slowdown_seconds = slowdown_seconds
        self.pair_seconds = pair_seconds
        self._take = redis.register_script(_TAKE)
        self._slow_down = redis.register_script(_SLOW_DOWN)
        self._pairs = redis.register_script(_PAIRS)

    def take(
        self,
        identity_id: int,
        lane: str,
        want: int,
        rates: Rates,
        other: float,
        *,
        ahead: float = 0.0,
        gather: bool = False,
    ) -> Grant:
        """Up to `want` slots for `lane`, now or up to `ahead` seconds from now, each with
        its start. `other` is the other lane's rate: the total bucket (taken only when the
        lanes add up to more than the total) has a burst that covers both lanes' bursts, so
        one lane cannot starve the other.

        With `gather` (a campaign), none are granted until half of what the buckets could
        grant (a burst and `ahead`'s worth) is free, or `want` if fewer, and the wait is
        until then. Slot by slot, a drain below a worker's speed woke for every slot, each
        wake a step of reads, a claim and a record for one message
        (`bench/send_rate.py --low-rate`: at 80/s a send cost the worker five times its
        CPU at full speed). Half leaves the other half for a wake that comes late."""
        if want <= 0:
            return Grant(0, 0.0)
        factor = self.slowdown(identity_id)
        lane_interval, lane_burst = _bucket(rates.lane * factor, self.burst_seconds)
        total_interval, total_burst = _bucket(rates.total * factor, self.burst_seconds)
        other_burst = _bucket(other * factor, self.burst_seconds)[1] if other > 0 else 0
        total_burst = max(total_burst, lane_burst + other_burst)
        ahead_us = max(0, int(ahead * 1_000_000))
        keys = [f"ratchet:pace:{identity_id}:{lane}"]
        args = [want, 1, ahead_us, lane_interval, lane_burst]
        if rates.lane + other > rates.total:
            # The lanes add up to more than the total (the CLI refuses it; a direct database
            # update can do it): the total's bucket caps them. Within it, as the CLI keeps
            # them, the two lanes' buckets already hold the total (their rates and bursts
            # add up to no more than its own), and slots booked ahead on a shared bucket
            # would hold a reply back behind a campaign's next quarter second.
            keys.append(f"ratchet:pace:{identity_id}:total")
            args += [total_interval, total_burst]
        if gather:
            # Half of what the tightest bucket could grant at once (its burst and `ahead`'s
            # worth): more would never be granted.
            pairs = zip(args[3::2], args[4::2], strict=True)
            cells = min(burst + ahead_us // interval for interval, burst in pairs)
            args[1] = min(want, max(1, cells // 2))
        granted, wait, *starts = self._take(keys=keys, args=args)
        return Grant(int(granted), int(wait) / 1_000_000, tuple(int(s) / 1_000_000 for s in starts))

    # Feedback from the provider ------------------------------------------------------

    def slowdown(self, identity_id: int) -> float:
        """The factor the identity's rates are multiplied by now (1.0: full speed)."""
        raw = self.redis.get(f"ratchet:slow:{identity_id}")
        return float(raw) if raw else 1.0

    def slow_down(self, identity_id: int) -> float:
        """The provider said too fast: halve the identity's rates for a minute."""
        factor = self._slow_down(
            keys=[f"ratchet:slow:{identity_id}"],
            args=[repr(SLOWEST), int(self.slowdown_seconds * 1000)],
        )
        return float(factor)

    # The pair limit: after a 131056 a recipient is not sent to for `pair_seconds` (the
    # provider's spacing, about 6 s), then stays paced for `slowdown_seconds` after its
    # last 131056: one message at a time, each starting the spacing again. Without that,
    # the batch after the first wait took every message due to that recipient at once,
    # and all but one met 131056 again, each counted against the message's cap.

    def pair_limited(self, identity_id: int, recipient: str) -> None:
        """A pair-limit answer for a send from this identity to this recipient."""
        self._pair_script(identity_id, "limited", [recipient])

    def pair_sends(self, identity_id: int, recipients: list[str]) -> None:
        """Sends to these recipients were just claimed: the paced ones wait the spacing."""
        if recipients:
            self._pair_script(identity_id, "sent", recipients)

    def recipient_paces(self, identity_id: int) -> RecipientPaces:
        blocked, paced, wait = self._pair_script(identity_id, "read", [])
        micros = int(wait) if isinstance(wait, bytes | str) else -1
        return RecipientPaces(
            _strings(blocked), _strings(paced), micros / 1_000_000 if micros >= 0 else None
        )

    def _pair_script(self, identity_id: int, mode: str, recipients: list[str]) -> list[Any]:
        spacing = int(self.pair_seconds * 1_000_000)
        paced_for = int(max(self.slowdown_seconds, self.pair_seconds) * 1_000_000)
        answer: list[Any] = self._pairs(
            keys=[f"ratchet:pair:{identity_id}", f"ratchet:pair-paced:{identity_id}"],
            args=[mode, spacing, paced_for, *recipients],
        )
        return answer


def _strings(members: list[bytes | str]) -> list[str]:
    return [m.decode() if isinstance(m, bytes) else str(m) for m in members]


@dataclass(frozen=True, slots=True)
class Pace:
    """How fast an identity may send now: its rates times `factor` (1.0: full speed), and
    for how long more the provider's slow-down lasts."""

    factor: float
    seconds_left: float

    @property
    def slowed(self) -> bool:
        return self.factor < 1.0


def paces(redis: Redis, identity_ids: list[int]) -> dict[int, Pace]:
    """Each identity's current pace, in one round trip (for the identities page)."""
    pipe = redis.pipeline(transaction=False)
    for identity_id in identity_ids:
        pipe.get(f"ratchet:slow:{identity_id}")
        pipe.pttl(f"ratchet:slow:{identity_id}")
    answers = pipe.execute()
    found = {}
    for index, identity_id in enumerate(identity_ids):
        raw, ttl = answers[2 * index], answers[2 * index + 1]
        factor = float(raw) if raw else 1.0
        found[identity_id] = Pace(factor, max(0, int(ttl or 0)) / 1000 if raw else 0.0)
    return found


# Provider codes that mean "this identity is sending too fast" (not one recipient).
SLOW_DOWN_CODES = frozenset({130429, 80007, 4, 20429})


def listen(pacer: Pacer, identity_id: int, recipient: str, result: SendResult) -> None:
    """The provider's word on our pace, after the outcome is recorded: a rate limit slows
    the identity, a pair limit paces the recipient. Best effort: without Redis the pace is
    simply not adjusted this time."""
    code = result.error.code if result.error else None
    try:
        if result.failure is FailureClass.RATE_LIMITED and code in SLOW_DOWN_CODES:
            factor = pacer.slow_down(identity_id)
            log.warning(
                "provider rate limit (%s): the identity's pace x%s for a minute", code, factor
            )
        elif result.failure is FailureClass.PAIR_LIMITED:
            pacer.pair_limited(identity_id, recipient)
    except RedisError as exc:
        log.warning("identity %s: pace not adjusted: %s", identity_id, exc)
