"""`DriverStatement` (app/repo/sql.py): a Core statement compiled once and sent as its text
must do what `session.execute` of the same statement does: the same rows, the same bind
processing (the UTC check, JSON), the values fixed in the statement, the Connection's
events and its error translation with the parameters hidden."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import (
    Column,
    Connection,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    event,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError, PendingRollbackError, StatementError

from app.db import Database
from app.models import WebhookDelivery
from app.repo.sql import DriverStatement

from ..conftest import T0, truncate_all
from ..connection_faults import terminate

_deliveries = cast(Table, WebhookDelivery.__table__)

INSERT = (
    insert(_deliveries)
    .values(
        provider=bindparam("provider", type_=_deliveries.c.provider.type),
        identity_id=bindparam("identity_id", type_=_deliveries.c.identity_id.type),
        headers=bindparam("headers", type_=_deliveries.c.headers.type),
        body=bindparam("body", type_=_deliveries.c.body.type),
        received_at=bindparam("now", type_=_deliveries.c.received_at.type),
    )
    .returning(_deliveries.c.id, _deliveries.c.provider)
)

# A bind used twice and a value fixed in the statement (the LIMIT).
SINCE = (
    select(_deliveries.c.id, _deliveries.c.body)
    .where(
        or_(
            _deliveries.c.received_at > bindparam("now", type_=_deliveries.c.received_at.type),
            _deliveries.c.received_at == bindparam("now", type_=_deliveries.c.received_at.type),
        )
    )
    .order_by(_deliveries.c.id)
    .limit(1)
)


def values(**changes: Any) -> dict[str, Any]:
    return {
        "provider": "whatsapp",
        "identity_id": None,
        "headers": {"Content-Type": "application/json", "X-Hub-Signature-256": "sha256=ab"},
        "body": '{"object": "whatsapp_business_account"}',
        "now": T0,
        **changes,
    }


def test_it_writes_and_returns_what_session_execute_does(db: Database) -> None:
    statement = DriverStatement(INSERT)
    given = values()
    with db.transaction() as session:
        by_text = statement.execute(session, given).one()
        by_core = session.execute(INSERT, values(body="by core")).one()
        assert given == values()  # the caller's parameters are not processed in place
        again = statement.execute(session, given).one()  # the same dict, once more
    assert by_text.provider == by_core.provider == "whatsapp"
    assert by_core.id == by_text.id + 1 and again.id == by_core.id + 1
    with db.transaction() as session:
        rows = {row.id: row for row in session.scalars(select(WebhookDelivery))}
    # JSON went through its serialiser, the time through the UTC type, both as Core's.
    for delivery_id in (by_text.id, again.id):
        assert rows[delivery_id].headers == values()["headers"]
        assert rows[delivery_id].received_at == T0
    assert rows[by_core.id].headers == values()["headers"]


def test_a_naive_time_is_refused_as_the_type_refuses_it(db: Database) -> None:
    naive = values(now=datetime(2026, 1, 1), body="a body that must not reach a log")
    with db.transaction() as session:
        with pytest.raises(StatementError, match="naive datetime") as by_text:
            DriverStatement(INSERT).execute(session, naive)
        with pytest.raises(StatementError, match="naive datetime") as by_core:
            session.execute(INSERT, naive)
        assert session.scalars(select(WebhookDelivery)).all() == []
    assert isinstance(by_text.value.orig, ValueError) and isinstance(by_core.value.orig, ValueError)
    assert "must not reach" not in str(by_text.value)


def test_a_missing_parameter_is_a_statement_error_as_core_raises_it(db: Database) -> None:
    given = values()
    del given["body"]
    with db.transaction() as session:
        with pytest.raises(StatementError, match="'body'"):
            DriverStatement(INSERT).execute(session, given)
        del given["now"]  # one with a bind processor
        with pytest.raises(StatementError, match="'now'"):
            DriverStatement(INSERT).execute(session, given)


def test_a_time_in_another_zone_is_stored_as_the_same_instant(db: Database) -> None:
    elsewhere = T0.astimezone(datetime.now(UTC).astimezone().tzinfo)
    with db.transaction() as session:
        DriverStatement(INSERT).execute(session, values(now=elsewhere))
        stored = session.scalars(select(WebhookDelivery)).one()
    assert stored.received_at == T0


def test_a_repeated_bind_and_a_fixed_limit(db: Database) -> None:
    insert_ = DriverStatement(INSERT)
    with db.transaction() as session:
        ids = [
            insert_.execute(session, values(body=f"b{n}", now=T0 + timedelta(seconds=n))).one().id
            for n in range(3)
        ]
        since = DriverStatement(SINCE)
        rows = since.execute(session, {"now": T0 + timedelta(seconds=1)}).all()
        core = session.execute(SINCE, {"now": T0 + timedelta(seconds=1)}).all()
    assert [tuple(row) for row in rows] == [tuple(row) for row in core] == [(ids[1], "b1")]


def test_the_connection_events_see_the_statement(db: Database) -> None:
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", before)
    try:
        with db.transaction() as session:
            DriverStatement(INSERT).execute(session, values())
    finally:
        event.remove(db.engine, "before_cursor_execute", before)
    assert [s for s in seen if s.startswith("INSERT INTO webhook_deliveries")], seen


def test_sqlalchemy_s_statement_log_shows_the_statement(
    own_db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """With the engine logger at INFO (what `echo` sets), the statement goes through the
    Connection, which logs it. (A Connection reads the level when it is made: hence a
    database of its own, whose transaction makes one after the level is set.)"""
    with (
        caplog.at_level(logging.INFO, logger="sqlalchemy.engine"),
        own_db.transaction() as session,
    ):
        row = DriverStatement(INSERT).execute(session, values()).one()
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy.engine")]
    assert row.provider == "whatsapp"
    assert [m for m in logged if m.startswith("INSERT INTO webhook_deliveries")], logged


def test_a_dialect_s_do_execute_listener_sees_the_statement(db: Database) -> None:
    seen: list[str] = []

    def do_execute(cursor: Any, statement: str, parameters: Any, context: Any) -> None:
        seen.append(statement)  # returns None: the dialect executes it as usual

    event.listen(db.engine, "do_execute", do_execute)
    try:
        with db.transaction() as session:
            row = DriverStatement(INSERT).execute(session, values()).one()
    finally:
        event.remove(db.engine, "do_execute", do_execute)
    assert row.provider == "whatsapp"
    assert [s for s in seen if s.startswith("INSERT INTO webhook_deliveries")], seen


def test_a_refused_statement_raises_sqlalchemy_s_error_without_its_values(db: Database) -> None:
    secret_body = "a body that must not reach a log"
    with pytest.raises(IntegrityError) as raised, db.transaction() as session:
        # No identity 999999: the foreign key refuses the row.
        DriverStatement(INSERT).execute(session, values(identity_id=999_999, body=secret_body))
    assert "fk_webhook_deliveries_identity_id_identities" in str(raised.value)
    assert secret_body not in str(raised.value)


def test_a_parameter_computed_at_execution_is_refused_when_compiled(db: Database) -> None:
    computed = select(bindparam("x", callable_=lambda: 1))
    with db.transaction() as session, pytest.raises(ValueError, match="computed at execution"):
        DriverStatement(computed).execute(session, {})


def test_a_none_fixed_in_the_statement_is_sent_as_null(db: Database) -> None:
    """`.values(identity_id=None)` binds a None of the statement's own (as `literal(None)`
    would): it is sent like any other fixed value, not asked of the caller."""
    cleared = (
        insert(_deliveries)
        .values(
            provider=bindparam("provider", type_=_deliveries.c.provider.type),
            identity_id=None,
            headers=bindparam("headers", type_=_deliveries.c.headers.type),
            body=bindparam("body", type_=_deliveries.c.body.type),
            received_at=bindparam("now", type_=_deliveries.c.received_at.type),
        )
        .returning(_deliveries.c.id, _deliveries.c.identity_id)
    )
    given = values()
    del given["identity_id"]
    with db.transaction() as session:
        by_text = DriverStatement(cleared).execute(session, given).one()
        by_core = session.execute(cleared, given).one()
    assert by_text.identity_id is None and by_core.identity_id is None


_defaults = Table(
    "driver_statement_defaults",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("name", String(20)),
    Column("tries", Integer, default=0, onupdate=1),
)


@pytest.mark.parametrize(
    ("statement", "why"),
    [
        # A Python-side default / onupdate is computed per execution by SQLAlchemy.
        (insert(_defaults).values(name=bindparam("name")), "Python-side default"),
        (update(_defaults).values(name=bindparam("name")), "Python-side default"),
        (select(_deliveries.c.id).where(_deliveries.c.id.in_([1, 2])), "expanding"),
        (
            select(_deliveries.c.id).where(
                _deliveries.c.id == bindparam("x", 1, literal_execute=True)
            ),
            "literal-execute",
        ),
        (select(_deliveries.c.id).where(_deliveries.c.body == bindparam("a.b")), "escaped"),
    ],
    ids=["insert default", "onupdate", "in list", "literal execute", "escaped name"],
)
def test_what_only_an_execution_can_supply_is_refused_when_compiled(
    db: Database, statement: Any, why: str
) -> None:
    with db.transaction() as session, pytest.raises(ValueError, match=why):
        DriverStatement(statement).execute(session, {"name": "n", "a.b": "x"})


# On psycopg the text goes to the driver's cursor itself, unless the Connection's events are
# listened to: what the Connection would add must still happen. -------------------------


@pytest.fixture
def own_db(pg_url: str) -> Iterator[Database]:
    """A database of its own, not bound to a test's transaction: its statements commit,
    and a connection it loses is its own."""
    database = Database(pg_url, pool_size=2, max_overflow=0)
    yield database
    truncate_all(database)
    database.dispose()


def test_a_statement_committed_by_itself_leaves_no_transaction_behind(own_db: Database) -> None:
    """`Database.autocommit`: psycopg's autocommit, and no transaction of SQLAlchemy's
    begun around the statement (`exec_driver_sql` would begin one)."""
    with own_db.autocommit() as connection:
        assert isinstance(connection, Connection)
        row = DriverStatement(INSERT).execute(connection, values()).one()
        assert not connection.in_transaction()
        # Another connection sees it at once: committed as it ran.
        with own_db.engine.connect() as other:
            seen = other.execute(
                select(_deliveries.c.id).where(_deliveries.c.id == row.id)
            ).scalar_one()
    assert seen == row.id


def test_a_statement_outside_a_transaction_begins_one_for_the_caller_s_commit(
    own_db: Database,
) -> None:
    with own_db.engine.connect() as connection:
        row = DriverStatement(INSERT).execute(connection, values()).one()
        assert connection.in_transaction()
        connection.commit()
    with own_db.engine.connect() as connection:
        kept = connection.execute(select(_deliveries.c.id)).scalars().all()
        rolled = DriverStatement(INSERT).execute(connection, values(body="rolled back")).one()
        connection.rollback()
        after = connection.execute(select(_deliveries.c.id)).scalars().all()
    assert kept == after == [row.id] and rolled.id not in after


def test_a_connection_lost_under_the_statement_is_invalidated_not_pooled_again(
    pg_url: str, own_db: Database
) -> None:
    with own_db.engine.connect() as connection:
        pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        connection.commit()
        terminate(pg_url, pid)  # while checked out: no checkout's check stands between
        with pytest.raises(OperationalError) as raised:
            DriverStatement(INSERT).execute(connection, values(body="a body never stored"))
        assert connection.invalidated
    assert raised.value.connection_invalidated
    assert "never stored" not in str(raised.value)
    with own_db.autocommit() as connection:
        assert isinstance(connection, Connection)
        again = DriverStatement(INSERT).execute(connection, values()).one()
        assert connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() != pid
    with own_db.engine.connect() as connection:
        stored = connection.execute(select(_deliveries.c.id, _deliveries.c.body)).all()
    assert [tuple(row) for row in stored] == [(again.id, values()["body"])]


def test_a_refused_statement_in_a_savepoint_leaves_the_transaction_usable_after_it(
    own_db: Database,
) -> None:
    with own_db.engine.connect() as connection:
        nested = connection.begin_nested()
        with pytest.raises(IntegrityError):
            DriverStatement(INSERT).execute(connection, values(identity_id=999_999))
        nested.rollback()
        row = DriverStatement(INSERT).execute(connection, values()).one()
        connection.commit()
    with own_db.engine.connect() as connection:
        assert connection.execute(select(_deliveries.c.id)).scalars().all() == [row.id]


def test_a_connection_that_can_take_no_statement_raises_sqlalchemy_s_error(
    own_db: Database,
) -> None:
    with own_db.engine.connect() as connection:
        DriverStatement(INSERT).execute(connection, values())
        connection.invalidate()  # in its transaction: nothing more until it is rolled back
        with pytest.raises(PendingRollbackError):
            DriverStatement(INSERT).execute(connection, values())


def test_a_lost_connection_retires_the_connections_pooled_before_it(
    pg_url: str, own_db: Database
) -> None:
    """As SQLAlchemy does: a connection pooled before the loss may be as dead (a failover,
    a network path gone silent) and still pass the checkout's socket check."""
    with own_db.engine.connect() as pooled, own_db.engine.connect() as connection:
        older = pooled.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        pooled.rollback()
        connection.commit()
        pooled.close()  # back in the pool, alive
        terminate(pg_url, pid)
        with pytest.raises(OperationalError):
            DriverStatement(INSERT).execute(connection, values())
    with own_db.engine.connect() as connection:
        now = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        connection.rollback()
    assert now not in (older, pid)


def test_columns_no_attribute_can_be_named_still_come_back_by_position(
    own_db: Database,
) -> None:
    """Named after the statement ran (in autocommit, committed): a repeated name or a
    keyword must not fail there, or a stored row would look refused."""
    odd = insert(_deliveries).values(
        provider=bindparam("provider", type_=_deliveries.c.provider.type),
        identity_id=bindparam("identity_id", type_=_deliveries.c.identity_id.type),
        headers=bindparam("headers", type_=_deliveries.c.headers.type),
        body=bindparam("body", type_=_deliveries.c.body.type),
        received_at=bindparam("now", type_=_deliveries.c.received_at.type),
    )
    odd = odd.returning(
        _deliveries.c.id, _deliveries.c.id.label("from"), _deliveries.c.provider.label("_p")
    )
    with own_db.autocommit() as connection:
        assert isinstance(connection, Connection)
        row = DriverStatement(odd).execute(connection, values()).one()
    assert row.id == row[1] and row[2] == "whatsapp"


def test_a_statement_without_rows_gives_none_on_either_path(own_db: Database) -> None:
    touch = update(_deliveries).values(body=bindparam("b", type_=_deliveries.c.body.type))
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    with own_db.engine.begin() as connection:
        assert DriverStatement(touch).execute(connection, {"b": "x"}).all() == []
        event.listen(own_db.engine, "before_cursor_execute", before)
        try:
            assert DriverStatement(touch).execute(connection, {"b": "y"}).all() == []
        finally:
            event.remove(own_db.engine, "before_cursor_execute", before)
    assert [s for s in seen if s.startswith("UPDATE webhook_deliveries")]
