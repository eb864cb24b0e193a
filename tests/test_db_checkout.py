"""The check a pooled PostgreSQL connection gets at checkout
(`app.db_checkout.check_on_checkout`): in place of SQLAlchemy's pre-ping round trip, the
socket is looked at, and only a connection idle for a while is pinged. Either way a dead
connection is replaced before anyone's statement meets it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import Counter
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from app import instruments
from app.db import TCP_SETTINGS, Database, normalise_url
from app.db_clock import sync_clock

from .connection_faults import ForgetfulPath, path, terminate, through

__all__ = ["path"]  # the fixture, imported for these tests


def counted(metric: Counter, **labels: str) -> float:
    """This process's value of a counter (`/metrics` shows the same)."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels == labels:
                return float(sample.value)
    return 0.0


def backend_pid(database: Database) -> int:
    with database.engine.connect() as connection:
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        connection.rollback()
    return int(pid)


def last_query(pg_url: str, pid: int) -> str:
    engine = create_engine(normalise_url(pg_url))
    try:
        with engine.connect() as other:
            query = other.execute(
                text("SELECT query FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar_one()
    finally:
        engine.dispose()
    return str(query)


@pytest.fixture(autouse=True)
def fresh_clock(pg_url: str) -> None:
    """The database's clock measured just now: a checkout that met an offset grown stale
    (`app/db_clock.py`, every 30 s) reads the clock after the ping, and that read, not the
    ping, would be the last query these tests see (once in a CI run)."""
    database = Database(pg_url, pool_size=1, max_overflow=0)
    try:
        sync_clock(database.engine, fresh_for=0.0)
    finally:
        database.dispose()


@pytest.fixture
def one_connection_db(pg_url: str) -> Iterator[Database]:
    """A pool of exactly one connection, never pinged for idleness (the socket alone)."""
    database = Database(pg_url, pool_size=1, max_overflow=0, ping_after_idle=3600.0)
    yield database
    database.dispose()


def test_a_connection_the_server_ended_while_pooled_is_replaced_before_use(
    pg_url: str, one_connection_db: Database
) -> None:
    first = backend_pid(one_connection_db)
    terminate(pg_url, first)  # a restart, a failover, pg_terminate_backend
    replaced, pings = (
        counted(instruments.DB_REPLACED, reason="hung_up"),
        counted(instruments.DB_PINGS),
    )
    # No round trip was made at checkout, and still the statement meets a live connection.
    second = backend_pid(one_connection_db)
    assert second != first
    assert counted(instruments.DB_REPLACED, reason="hung_up") == replaced + 1
    assert counted(instruments.DB_PINGS) == pings


def test_without_any_check_the_same_connection_would_fail_its_statement(pg_url: str) -> None:
    """The scenario above is real: a pool that neither pings nor looks hands it out dead."""
    engine = create_engine(normalise_url(pg_url), pool_size=1, max_overflow=0)
    try:
        with engine.connect() as connection:
            pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
            connection.rollback()
        terminate(pg_url, pid)
        with pytest.raises(DBAPIError) as raised, engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        assert raised.value.connection_invalidated
    finally:
        engine.dispose()


def test_a_connection_used_moments_ago_is_not_pinged(
    pg_url: str, one_connection_db: Database
) -> None:
    pid = backend_pid(one_connection_db)
    returned = last_query(pg_url, pid)  # the pool's own reset, as it went back
    with one_connection_db.engine.connect():
        # Checked out again: the server has been sent nothing since.
        assert last_query(pg_url, pid) == returned


def test_a_connection_idle_past_the_limit_is_pinged_before_use(pg_url: str) -> None:
    database = Database(pg_url, pool_size=1, max_overflow=0, ping_after_idle=0.0)
    try:
        pid = backend_pid(database)
        assert last_query(pg_url, pid) == "ROLLBACK"  # the pool's own reset
        with database.engine.connect():
            # The ping went before any statement of ours (SQLAlchemy's ping for
            # PostgreSQL is an empty statement).
            assert last_query(pg_url, pid) == ";"
    finally:
        database.dispose()


def test_a_connection_held_a_while_with_nothing_sent_is_pinged_when_next_handed_out(
    pg_url: str,
) -> None:
    """Idle from when it was handed out: holding it quietly does not make it fresh."""
    database = Database(pg_url, pool_size=1, max_overflow=0, ping_after_idle=0.3)
    try:
        pid = backend_pid(database)
        with database.engine.connect():  # held, nothing sent
            time.sleep(0.4)
        assert last_query(pg_url, pid) == "ROLLBACK"
        with database.engine.connect():
            assert last_query(pg_url, pid) == ";"  # pinged before use
    finally:
        database.dispose()


def test_a_connection_dropped_silently_while_idle_is_replaced_by_the_ping(
    pg_url: str, path: ForgetfulPath
) -> None:
    database = Database(through(pg_url, path), pool_size=1, max_overflow=0, ping_after_idle=0.0)
    try:
        first = backend_pid(database)
        path.forget()
        time.sleep(0.05)  # nothing reaches the client: its socket shows nothing
        replaced = counted(instruments.DB_REPLACED, reason="no_answer")
        second = backend_pid(database)
        assert second != first
        assert counted(instruments.DB_REPLACED, reason="no_answer") == replaced + 1
    finally:
        database.dispose()


def test_a_connection_dropped_silently_and_used_at_once_fails_its_statement(
    pg_url: str, path: ForgetfulPath
) -> None:
    """What the idle ping is for: the socket alone cannot show a silent drop."""
    database = Database(through(pg_url, path), pool_size=1, max_overflow=0, ping_after_idle=3600.0)
    try:
        backend_pid(database)
        path.forget()
        time.sleep(0.05)
        with pytest.raises(DBAPIError) as raised, database.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        assert raised.value.connection_invalidated
    finally:
        database.dispose()


def test_a_unit_of_work_that_asks_is_pinged_however_recently_its_connection_was_used(
    pg_url: str, path: ForgetfulPath
) -> None:
    """`transaction(ping=True)`: the record of a provider's answer, after the call."""
    database = Database(through(pg_url, path), pool_size=1, max_overflow=0, ping_after_idle=3600.0)
    try:
        first = backend_pid(database)
        path.forget()
        time.sleep(0.05)
        with database.transaction(ping=True) as session:
            second = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        assert second != first
        # Only that unit of work: the next one is not pinged (its connection is new).
        pings = counted(instruments.DB_PINGS)
        assert backend_pid(database) == second
        assert counted(instruments.DB_PINGS) == pings
    finally:
        database.dispose()


def test_a_failed_ping_replaces_every_connection_pooled_before_it(
    pg_url: str, path: ForgetfulPath
) -> None:
    """The path that dropped one dropped the others: they are not handed out either."""
    database = Database(through(pg_url, path), pool_size=2, max_overflow=0, ping_after_idle=3600.0)
    try:
        with database.engine.connect() as one, database.engine.connect() as two:
            pids = {
                connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
                for connection in (one, two)
            }
            one.rollback()
            two.rollback()
        path.forget()
        time.sleep(0.05)
        with database.transaction(ping=True) as session:  # pinged: replaced
            session.execute(text("SELECT 1"))
        # Not pinged (used moments ago, no ping asked): still not the dead one.
        with database.engine.connect() as one, database.engine.connect() as two:
            now = {
                connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
                for connection in (one, two)
            }
        assert not now & pids
    finally:
        database.dispose()


def test_every_connection_carries_deadlines_for_a_path_that_drops_packets(pg_url: str) -> None:
    """A path that drops packets without a reset gets no answer at all: without these a
    ping or a record would wait out the kernel's retransmissions (about 15 minutes). Only
    the settings are checked here: a local path always acknowledges what it is sent."""
    database = Database(pg_url, pool_size=1, max_overflow=0)
    override = make_url(normalise_url(pg_url)).update_query_dict({"tcp_user_timeout": "2500"})
    overridden = Database(override.render_as_string(hide_password=False))
    try:
        for db, user_timeout in ((database, "10000"), (overridden, "2500")):
            with db.engine.connect() as connection:
                driver = connection.connection.driver_connection
                assert driver is not None
                settings = driver.info.get_parameters()
                connection.rollback()
            expected = {name: str(value) for name, value in TCP_SETTINGS.items()}
            expected["tcp_user_timeout"] = user_timeout  # the URL's own wins
            assert {name: settings.get(name) for name in TCP_SETTINGS} == expected
    finally:
        database.dispose()
        overridden.dispose()


def test_a_ping_cannot_be_asked_of_a_connection_already_checked_out(pg_url: str) -> None:
    database = Database(pg_url, pool_size=1, max_overflow=0)
    try:
        with (
            database.one_connection() as pinned,
            pytest.raises(ValueError, match="pinned"),
            pinned.transaction(ping=True),
        ):
            pass
    finally:
        database.dispose()
