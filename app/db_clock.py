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
    seconds (one round trip, rolled back so the connection goes out with no transaction
    open). Installed by `app.db.build_engine` on PostgreSQL engines."""

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
    """PostgreSQL's `clock_timestamp()` (the time now, not the transaction's start)."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT clock_timestamp()")
        (moment,) = cursor.fetchone()
    finally:
        cursor.close()
        dbapi_connection.rollback()
    return moment


def sync_clock(engine: Engine) -> None:
    """Measure the offset now (a process starting), if the engine is PostgreSQL's and the
    offset is not fresh. A database not reachable yet is logged, not raised: the first
    checkout that succeeds measures it."""
    if engine.dialect.name != "postgresql" or not is_offset_older_than(REFRESH_SECONDS):
        return
    try:
        with engine.connect():
            pass  # the checkout measured it
    except exc.SQLAlchemyError as error:
        log.warning("could not read the database's clock at start: %s", error)
