"""Shared fixtures: real PostgreSQL and Redis, the clock passed in.

- `db`: a rolled-back transaction per test (SQLAlchemy's savepoint recipe); the app's
  own units of work become savepoints inside it.
- `committed_db`: real commits, tables truncated before and after, for tests that span
  connections, threads or processes.
- `redis_url`: a Redis database of its own, flushed around each test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from hypothesis import settings
from jinja2 import BytecodeCache
from redis import Redis
from sqlalchemy import text

from app import create_app, migrate
from app.db import Database, build_engine
from app.models import Base
from app.models_operations import BulkPlan  # noqa: F401  (its tables in the metadata)

from . import parallel

# Hypothesis's default per-example deadline is a wall-clock assertion: off on shared machines.
settings.register_profile("ratchet", deadline=None, max_examples=60)
settings.load_profile("ratchet")

PG_URL = os.environ.get("TEST_DATABASE_URL", "postgresql+psycopg://127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# Under pytest-xdist each process has a database and a Redis database of its own
# (`tests/parallel.py`): gw0 keeps the ones above, gw1 gets `<database>_gw1` and the
# Redis database below, and so on.
PG_URL, REDIS_URL = parallel.own_stores(PG_URL, REDIS_URL, os.environ.get("PYTEST_XDIST_WORKER"))
SECRET_KEY = "test-secret-key-not-for-production"
# /metrics is closed without a token: the test apps have this one.
METRICS_TOKEN = "test-metrics-token-not-for-production"
METRICS_AUTH = {"Authorization": f"Bearer {METRICS_TOKEN}"}

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
# The test servers' `serve_forever` looks for a shutdown this often: socketserver's default
# (0.5 s) cost every test that stops a server up to half a second of its teardown.
POLL = {"poll_interval": 0.02}
TEST_PASSWORD_HASH = "pbkdf2:sha256:1000"


def at(seconds: float) -> datetime:
    """`seconds` after T0, the tests' clock."""
    return T0 + timedelta(seconds=seconds)


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The test database, emptied and migrated once per run."""
    parallel.create_database(PG_URL)
    engine = build_engine(PG_URL)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    migrate.upgrade(engine)
    engine.dispose()
    return PG_URL


@pytest.fixture
def redis_url() -> Iterator[str]:
    client = Redis.from_url(REDIS_URL)
    client.flushdb()
    yield REDIS_URL
    client.flushdb()
    client.close()


class _SharedTemplates(BytecodeCache):
    """Compiled templates kept for the whole run: every test makes an app of its own, and
    each app's Jinja environment would otherwise compile the same templates again. Keyed
    by template name and source checksum (Jinja's own bucket), so an edit is never stale."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Any) -> None:
        if bucket.key in self._code:
            bucket.bytecode_from_string(self._code[bucket.key])

    def dump_bytecode(self, bucket: Any) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_TEMPLATES = _SharedTemplates()


def make_app(pg_url: str, redis_url: str, **overrides: object) -> Flask:
    values = {
        "database_url": pg_url,
        "redis_url": redis_url,
        "secret_key": SECRET_KEY,
        "metrics_token": METRICS_TOKEN,
        # A fast hash for the suite's many staff logins (scrypt costs about 80 ms a hash);
        # the default stays scrypt (tests/test_password_hash.py).
        "password_hash": TEST_PASSWORD_HASH,
    }
    values.update(overrides)
    app = create_app(values)
    app.config["TESTING"] = True
    app.jinja_env.bytecode_cache = _TEMPLATES
    return app


@pytest.fixture
def app(pg_url: str, redis_url: str) -> Iterator[Flask]:
    app = make_app(pg_url, redis_url)
    with app.app_context():
        yield app
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()


@pytest.fixture
def db(app: Flask) -> Iterator[Database]:
    database: Database = app.extensions["ratchet.db"]
    connection = database.engine.connect()
    outer = connection.begin()
    database.bind_to(connection)
    yield database
    outer.rollback()
    connection.close()


def truncate_all(database: Database) -> None:
    """Empty every table and restart every sequence. Only the tables holding a row are
    truncated (a TRUNCATE costs about as much per table whether it held rows or not, and
    most tests touch few), and every sequence restarts, as RESTART IDENTITY did."""
    names = [table.name for table in Base.metadata.sorted_tables]
    probe = " UNION ALL ".join(f"SELECT '{n}' WHERE EXISTS (SELECT 1 FROM {n})" for n in names)
    with database.engine.begin() as connection:
        used = list(connection.scalars(text(probe)))
        if used:
            connection.execute(text(f"TRUNCATE {', '.join(used)} CASCADE"))
        connection.execute(
            text(
                "SELECT setval(c.oid, 1, false) FROM pg_class c"
                " WHERE c.relkind = 'S' AND c.relnamespace = 'public'::regnamespace"
            )
        )


@pytest.fixture
def committed_db(app: Flask) -> Iterator[Database]:
    database: Database = app.extensions["ratchet.db"]
    truncate_all(database)
    yield database
    truncate_all(database)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def unused_port() -> int:
    return free_port()
