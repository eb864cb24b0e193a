"""`Database.autocommit`: one statement committed by itself, on the request's one pooled
connection, which must leave that connection transactional again whatever happened."""

from __future__ import annotations

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
