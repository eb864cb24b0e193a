"""The database's clock for every process (`app/clock.py`): measured on a pooled PostgreSQL
connection as it is handed out, when the last measure is older than `REFRESH_SECONDS`,
and once when a long-running process starts (`sync_clock`), so its first claim or stamp
is already on the database's clock.

Two processes compare times only through rows: a lease stamped by one worker is expired
by another, a claim's time is set against a resume stamped by the dashboard or the CLI.
Stamped on each machine's wall clock, a worker 30 s ahead would take over a lease 30 s
early and send a second copy; stamped on the database's clock, the machines may disagree
and the rows do not.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, event, exc

from app.clock import is_offset_older_than, measure_offset

log = logging.getLogger(__name__)

# How old a measured offset may get before the next checkout measures it again: a clock
# that NTP slews drifts by well under a millisecond in that time.
REFRESH_SECONDS = 30.0


def keep_database_clock(engine: Engine, refresh: float = REFRESH_SECONDS) -> None:
    """Measure the offset on a connection being handed out when it is older than `refresh`
    seconds (one round trip, with no transaction open before or after). Installed by
    `app.db.build_engine` on PostgreSQL engines."""

    @event.listens_for(engine, "checkout")
    def _measure(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if not is_offset_older_than(refresh):
            return
        try:
            measure_offset(lambda: read_server_clock(dbapi_connection))
        except engine.dialect.loaded_dbapi.Error as error:
            # A connection that cannot answer this cannot serve the unit of work either:
            # SQLAlchemy checks out another (its documented checkout-listener contract).
            raise exc.DisconnectionError("the connection failed reading the clock") from error


def read_server_clock(dbapi_connection: Any) -> datetime:
    """PostgreSQL's `clock_timestamp()` (the time now, not the transaction's start), in
    one round trip: the statement alone, outside a transaction (no BEGIN before it, no
    ROLLBACK after it inside the timed read). A connection being handed out is idle."""
    was_autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    try:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SELECT clock_timestamp()")
            (moment,) = cursor.fetchone()
        finally:
            cursor.close()
    finally:
        dbapi_connection.autocommit = was_autocommit
    return moment


def sync_clock(engine: Engine, fresh_for: float = REFRESH_SECONDS) -> None:
    """Measure the offset now unless it was measured within `fresh_for` seconds (on
    PostgreSQL's engines only). A database not reachable is logged, not raised: the
    first checkout that succeeds measures it."""
    if engine.dialect.name != "postgresql" or not is_offset_older_than(fresh_for):
        return
    try:
        with engine.connect() as connection:
            measure_offset(lambda: read_server_clock(connection.connection.dbapi_connection))
    except exc.SQLAlchemyError as error:
        log.warning("could not read the database's clock: %s", error)


def start_clock_keeper(engine: Engine, every: float = REFRESH_SECONDS / 3) -> None:
    """A long-running process (a worker, the sweeper, a web process) measures at start,
    then again from a daemon thread whenever the offset is older than two thirds of
    `REFRESH_SECONDS`: a checkout measures only when the offset is stale, after the
    caller has already read `now` for the work it checks out for, so without this a
    process that sat idle would decide once on an offset older than that."""
    sync_clock(engine)
    # The connection used for that stays out of the pool a fork inherits (RQ's scheduler).
    engine.dispose()
    if engine.dialect.name != "postgresql":
        return

    def keep() -> None:
        while True:
            time.sleep(every)
            sync_clock(engine, fresh_for=REFRESH_SECONDS - every)

    threading.Thread(target=keep, name="database-clock", daemon=True).start()
