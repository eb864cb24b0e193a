"""One drain of an identity's lane, run in the test's process on the test's clock
(`run_drain`): the token is set as the lane's pending drain, then the drain runs with it.
And a drain's first half by hand (`called_batch`): claimed, prepared and called, for the
tests of what its record does with the ends. And the pace at the provider, from its
receipt times (`busiest_second`, `burst_of`).
"""

from __future__ import annotations

import math
import time
from datetime import timedelta

from app.repo.claims import claim_batch
from app.repo.identities import get_identity
from jobs.call import Called, call
from jobs.drain import Drain
from jobs.pacing import MIN_BURST, Pacer
from jobs.queues import drain_keys
from jobs.send import prepare_batch

from .conftest import Env


def run_drain(env: Env, identity_id: int, lane: str, token: str) -> str:
    redis = env.app.extensions["ratchet.redis"]
    config = env.config
    pacer = Pacer(redis, config.pacing_burst, config.pacing_slowdown, config.pair_limit_wait)
    redis.set(drain_keys(identity_id, lane)[0], token, px=60_000)
    drain = Drain(env.db, env.box, config, redis, pacer, identity_id, lane)
    drain.clock = env.clock
    return drain.run(token)


def called_batch(env: Env, identity_id: int) -> list[Called]:
    """Claim, prepare and call every due message of the campaign lane, as a drain does."""
    with env.db.transaction() as session:
        claims = claim_batch(
            session,
            identity_id,
            "campaign",
            10,
            env.now,
            timedelta(seconds=env.config.lease_seconds),
        )
        identity = get_identity(session, identity_id)
        batch, decided = prepare_batch(
            session, env.box, env.config, identity, claims, time.monotonic(), env.now
        )
    assert not decided
    calls = [call(env.config, p, time.monotonic, env.clock) for p in batch]
    assert all(c.result is not None and c.result.accepted for c in calls)
    return calls


BURST_SECONDS = 0.1  # RATCHET_PACING_BURST, as the tests' workers are given it


def busiest_second(times: list[float], start: float = 0.0, end: float = math.inf) -> int:
    """The most receipts in any one-second window starting at a receipt in [start, end)."""
    window = [t for t in times if start <= t < end]
    best = 0
    j = 0
    for i, t in enumerate(window):
        while j < len(window) and window[j] < t + 1.0:
            j += 1
        best = max(best, j - i)
    return best


def burst_of(rate: float) -> int:
    return max(MIN_BURST, math.ceil(rate * BURST_SECONDS))
