"""One drain of an identity's lane, run in the test's process on the test's clock
(`run_drain`): the token is set as the lane's pending drain, then the drain runs with it.
"""

from __future__ import annotations

from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env


def run_drain(env: Env, identity_id: int, lane: str, token: str) -> str:
    redis = env.app.extensions["ratchet.redis"]
    config = env.config
    pacer = Pacer(redis, config.pacing_burst, config.pacing_slowdown, config.pair_limit_wait)
    redis.set(drain_keys(identity_id, lane)[0], token, px=60_000)
    drain = Drain(env.db, env.box, config, redis, pacer, identity_id, lane)
    drain.clock = env.clock
    return drain.run(token)
