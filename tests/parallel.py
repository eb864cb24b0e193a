"""The suite's stores when pytest-xdist runs it in several processes.

Every test process needs a PostgreSQL database and a Redis database nobody else truncates or
flushes under it. The first process (`gw0`, or the only one without xdist) uses the ones the
environment names; process `gwN` uses `<database>_gwN` (made on first use) and the Redis
database N below the named one.
"""

from __future__ import annotations

from sqlalchemy import make_url, text

from app.db import build_engine


def worker_number(worker: str | None) -> int:
    """0 without xdist or for `gw0`; N for `gwN`."""
    if not worker:
        return 0
    if not worker.startswith("gw") or not worker[2:].isdigit():
        raise ValueError(f"not an xdist worker id: {worker!r}")
    return int(worker[2:])


def own_stores(pg_url: str, redis_url: str, worker: str | None) -> tuple[str, str]:
    """The database URL and the Redis URL of test process `worker`."""
    number = worker_number(worker)
    if number == 0:
        return pg_url, redis_url
    pg = make_url(pg_url)
    pg = pg.set(database=f"{pg.database}_gw{number}")
    base, _, db = redis_url.rpartition("/")
    redis_db = int(db or 0) - number
    if redis_db < 0:
        raise ValueError(
            f"TEST_REDIS_URL's database {db} leaves no Redis database for test process {number}:"
            " name a higher one (Redis has 16, 0 to 15)"
        )
    return pg.render_as_string(hide_password=False), f"{base}/{redis_db}"


def create_database(pg_url: str) -> None:
    """Make the database `pg_url` names if the server does not have it yet."""
    url = make_url(pg_url)
    server = url.set(database="postgres").render_as_string(hide_password=False)
    engine = build_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            exists = connection.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": url.database}
            ).first()
            if exists is None:
                name = connection.dialect.identifier_preparer.quote(str(url.database))
                connection.execute(text(f"CREATE DATABASE {name}"))
    finally:
        engine.dispose()
