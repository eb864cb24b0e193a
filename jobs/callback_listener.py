"""Rings callback drains the moment a change commits: PostgreSQL's NOTIFY on
`ratchet_callbacks` (sent by the outbox trigger of migration 0016, at commit, naming the
endpoints that have something new), LISTENed to by a thread of the sweeper.

Only a doorbell: a notification missed (the listener restarting, the sweeper down) costs
the wait for the sweeper's next pass, which rings every endpoint with something due.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from redis import Redis
from sqlalchemy import Engine

from app.config import Config
from jobs.callbacks import ring_endpoint

log = logging.getLogger(__name__)

CHANNEL = "ratchet_callbacks"
RECONNECT_SECONDS = 2.0


def conninfo(engine: Engine) -> str:
    """The engine's URL as libpq takes it (SQLAlchemy's driver name dropped)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class CallbackListener(threading.Thread):
    def __init__(self, engine: Engine, config: Config, redis: Redis) -> None:
        super().__init__(name="callback-listener", daemon=True)
        self.url, self.config, self.redis = conninfo(engine), config, redis
        self.stopping = threading.Event()
        self.listening = threading.Event()

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._listen()
            except (psycopg.Error, OSError) as exc:
                self.listening.clear()
                log.warning("callback listener: %s; listening again shortly", exc)
                self.stopping.wait(RECONNECT_SECONDS)

    def _listen(self) -> None:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as connection:
            connection.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            while not self.stopping.is_set():
                for note in connection.notifies(timeout=0.5):
                    for endpoint in {int(e) for e in note.payload.split(",") if e.isdigit()}:
                        ring_endpoint(endpoint, self.config, self.redis)
