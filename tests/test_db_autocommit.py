"""`Database.autocommit`: one statement committed by itself, on the request's one pooled
connection, which must leave that connection transactional again whatever happened."""

from __future__ import annotations

import signal

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from app.clock import utcnow
from app.db import Database
from app.models import Tenant
from app.repo.tenants import create_tenant


def tenants(database: Database) -> int:
    with database.transaction() as session:
        return session.scalar(select(func.count()).select_from(Tenant)) or 0


@pytest.mark.parametrize("fails", [False, True], ids=["after a statement", "after a failure"])
def test_the_next_transaction_on_the_connection_is_a_transaction_again(
    committed_db: Database, fails: bool
) -> None:
    with committed_db.one_connection() as db:
        if fails:
            with pytest.raises(DBAPIError), db.autocommit() as connection:
                connection.execute(text("SELECT 1 / 0"))
        else:
            with db.autocommit() as connection:
                assert connection.execute(text("SELECT 1")).scalar_one() == 1
        # Still in autocommit, this insert would stand though its transaction rolls back.
        with pytest.raises(RuntimeError), db.transaction() as session:
            create_tenant(session, "rolled-back", utcnow())
            session.flush()
            raise RuntimeError("roll it back")
    assert tenants(committed_db) == 0


def test_a_statement_in_autocommit_is_committed_by_itself(committed_db: Database) -> None:
    with committed_db.one_connection() as db, db.autocommit() as connection:
        connection.execute(
            text(
                "INSERT INTO tenants (name, api_key_prefix, api_key_hash, created_at) "
                "VALUES ('autocommitted', 'rk_auto', 'x', now())"
            )
        )
        driver = connection.connection.driver_connection
        assert driver is not None
        # No transaction open on the server: PostgreSQL committed the insert as it ran.
        assert driver.info.transaction_status.name == "IDLE"
    assert tenants(committed_db) == 1


def test_an_exception_inside_a_statement_leaves_no_connection_in_autocommit(
    committed_db: Database,
) -> None:
    # An exception raised while psycopg waits for the server (here a signal handler's, as
    # a worker's job timeout is) leaves the driver mid-statement: it cannot be switched
    # back, so it must never be used again, and the caller sees the exception it raised.
    def interrupt(*_: object) -> None:
        raise TimeoutError("interrupted mid-statement")

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with committed_db.one_connection() as db:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(TimeoutError), db.autocommit() as connection:
                connection.execute(text("SELECT pg_sleep(2)"))
            with pytest.raises(RuntimeError), db.transaction() as session:
                create_tenant(session, "rolled-back", utcnow())
                session.flush()
                raise RuntimeError("roll it back")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert tenants(committed_db) == 0


def test_a_connection_left_mid_statement_is_thrown_away_and_the_exception_kept(
    committed_db: Database,
) -> None:
    # The driver still busy with a statement when the block ends (libpq's own call sends
    # one and does not wait): it cannot be switched back, so it is invalidated, and the
    # block's own exception is the one the caller sees.
    with committed_db.one_connection() as db:
        with pytest.raises(LookupError, match="the block's own"), db.autocommit() as connection:
            driver = connection.connection.driver_connection
            assert driver is not None
            driver.pgconn.send_query(b"SELECT pg_sleep(0.2)")
            raise LookupError("the block's own")
        assert db.pinned_connection is not None and db.pinned_connection.invalidated
        with pytest.raises(RuntimeError), db.transaction() as session:
            create_tenant(session, "rolled-back", utcnow())
            session.flush()
            raise RuntimeError("roll it back")
    assert tenants(committed_db) == 0
