"""The database is down when a drain runs: the drain stops quietly and lets go of its key,
so the sweeper's next ring (once the database is back) starts a new one."""

from __future__ import annotations

from redis import Redis

from app.db import Database
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from ..conftest import free_port
from .conftest import Env


def test_a_drain_with_the_database_down_stops_quietly_and_releases_its_key(env: Env) -> None:
    redis: Redis = env.app.extensions["ratchet.redis"]
    down = Database(
        f"postgresql+psycopg://127.0.0.1:{free_port()}/x", connect_args={"connect_timeout": 1}
    )
    pending, _ = drain_keys(1, "campaign")
    redis.set(pending, "tok", px=30000)
    summary = Drain(down, env.box, env.config, redis, Pacer(redis), 1, "campaign").run("tok")
    assert "stopped: OperationalError" in summary
    assert redis.get(pending) is None
    down.dispose()
