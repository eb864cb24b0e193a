"""The check a pooled PostgreSQL connection gets when it is handed out (`check_on_checkout`,
installed by `app.db.build_engine`): in place of SQLAlchemy's pre-ping round trip, the
socket is looked at, and a ping is paid only where it buys something."""

from __future__ import annotations

import select
import time
from contextvars import ContextVar
from typing import Any

import psycopg
from sqlalchemy import Engine, event, exc

from app import instruments

# Set by `Database.transaction(ping=True)`: every checkout inside pings.
PING_EVERY_CHECKOUT: ContextVar[bool] = ContextVar("ratchet_ping_every_checkout", default=False)

HANDED_OUT = "ratchet.handed_out"


def check_on_checkout(engine: Engine, ping_after_idle: float) -> None:
    """SQLAlchemy's `pool_pre_ping`, paid only where a connection may have gone stale, or
    where a failure would cost more than a round trip.

    The pre-ping is a round trip on every checkout: about a twelfth of a webhook's CPU,
    where a request checks out once and the connection was last used a few milliseconds
    before. Instead, at checkout:

    - the socket is polled without waiting: a server that ended the session (a restart,
      a failover, `pg_terminate_backend`, `idle_session_timeout`) has closed it or sent
      its last error, so it reads as ready when nothing should be there;
    - a connection last handed out more than `ping_after_idle` seconds ago is also pinged,
      as the pre-ping would, for what the socket cannot show: a network path that dropped
      it silently (a NAT or a load balancer forgetting the flow, a virtual IP moving);
    - so is every connection a `Database.transaction(ping=True)` checks out, however
      recently used: the record of a provider's answer, which a silently dead connection
      would turn from an accepted send into an unknown outcome.

    Either way the connection is replaced before anyone uses it (SQLAlchemy's documented
    `DisconnectionError` from a checkout listener). What goes unchecked is a connection
    handed out in the last `ping_after_idle` seconds whose path died silently since, for
    units of work that can fail safely: a webhook answers 5xx and is delivered again, an
    API call answers 5xx and is retried with its idempotency key, a claim or a sweep is
    done again.
    """
    dialect = engine.dialect

    @event.listens_for(engine, "connect")
    def _fresh(_dbapi_connection: Any, record: Any) -> None:
        record.info.pop(HANDED_OUT, None)  # just connected: nothing to check

    @event.listens_for(engine, "checkout")
    def _check(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        now = time.monotonic()
        # From when it was last handed out, not returned: a connection held a while with
        # nothing sent goes back to the pool no fresher than when it left.
        handed_out = record.info.get(HANDED_OUT)
        record.info[HANDED_OUT] = now
        if handed_out is None:
            return
        if _hung_up(dbapi_connection):
            instruments.DB_REPLACED.labels("hung_up").inc()
            raise exc.DisconnectionError("the server closed the connection while it was pooled")
        if now - handed_out < ping_after_idle and not PING_EVERY_CHECKOUT.get():
            return
        instruments.DB_PINGS.inc()
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as error:
            if dialect.is_disconnect(error, dbapi_connection, None):
                instruments.DB_REPLACED.labels("no_answer").inc()
                # As the pre-ping does: the others pooled before now go too.
                raise exc.InvalidatePoolError("the pooled connection did not answer") from error
            raise


def _hung_up(dbapi_connection: Any) -> bool:
    """An idle psycopg connection whose socket is readable (or closed) is one the server
    has ended: between statements it sends nothing unasked (we use no LISTEN)."""
    if dbapi_connection.closed:
        return True
    try:
        fd = dbapi_connection.pgconn.socket
    except psycopg.OperationalError:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)  # errors and hang-ups always report
    return bool(poller.poll(0))
