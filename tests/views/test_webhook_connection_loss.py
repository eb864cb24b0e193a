"""A webhook whose database connection is lost while its statuses are being stored.

The connection dying is not the database refusing a value: the next transaction on the
request's pinned connection reconnects, so keeping the raw delivery alone and answering
2xx would drop the statuses for good (the provider never sends them again, and nothing
replays a status that was never stored). The delivery must instead go unacknowledged,
so the provider redelivers it, and the redelivery applies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import event, func, select, text

from app.db import Database
from app.models import Message, WebhookDelivery, WebhookStatus
from jobs.sweep import sweep_once

from ..conftest import at
from ..factories import make_world
from ..meta import PHONE_NUMBER_ID, encode, sign, status, status_body
from ..whatsapp_world import SECRET, deliver, sent_message
from . import twilio_world as tw


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    app.config["PROPAGATE_EXCEPTIONS"] = False  # a 500 is an answer here, not a crash
    return app.test_client()


@contextmanager
def connection_lost_at(database: Database, needle: str) -> Iterator[list[int]]:
    """Terminate the server process of the connection about to run the first statement
    containing `needle` (PostgreSQL restarting, a failover, a proxy dropping it), and wait
    until it is gone, so that statement meets a dead connection."""
    killed: list[int] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if killed or needle not in statement:
            return
        pid = conn.connection.dbapi_connection.info.backend_pid
        with database.engine.connect() as other:
            # With a timeout, pg_terminate_backend returns once the process has exited.
            gone = other.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})
            assert gone.scalar_one() is True
        killed.append(pid)

    event.listen(database.engine, "before_cursor_execute", before)
    try:
        yield killed
    finally:
        event.remove(database.engine, "before_cursor_execute", before)


def stored(database: Database) -> tuple[int, int]:
    with database.transaction() as session:
        deliveries = session.scalar(select(func.count()).select_from(WebhookDelivery)) or 0
        statuses = session.scalar(select(func.count()).select_from(WebhookStatus)) or 0
    return deliveries, statuses


def state(database: Database, message_id: int) -> Message:
    with database.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        return row


@pytest.mark.parametrize("statuses", [1, 2], ids=["one status", "two statuses"])
def test_a_whatsapp_delivery_whose_connection_dies_is_not_acknowledged_without_its_statuses(
    client: FlaskClient, committed_db: Database, statuses: int
) -> None:
    """One status takes the one-statement record; two go step by step: the same rule."""
    world = make_world(committed_db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)
    ids = [sent_message(committed_db, world, f"wamid.LOST{n}") for n in range(statuses)]
    raw = encode(
        status_body([status(f"wamid.LOST{n}", "delivered", at(5)) for n in range(statuses)])
    )
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)}

    with connection_lost_at(committed_db, "INSERT INTO webhook_statuses") as killed:
        response = client.post("/webhooks/whatsapp", data=raw, headers=headers)
    assert killed  # the statuses' statement did meet a dead connection
    deliveries, kept_statuses = stored(committed_db)
    # A 2xx tells Meta never to send it again: then its statuses must have been stored.
    assert response.status_code >= 500 or kept_statuses == statuses, (
        response.status_code,
        response.get_json(),
        (deliveries, kept_statuses),
    )

    # Meta redelivers what was not acknowledged; the statuses apply.
    again = client.post("/webhooks/whatsapp", data=raw, headers=headers)
    assert again.status_code == 200
    assert [state(committed_db, message_id).status for message_id in ids] == ["delivered"] * len(
        ids
    )


def test_a_twilio_callback_whose_connection_dies_is_not_acknowledged_without_its_status(
    client: FlaskClient, committed_db: Database
) -> None:
    world = tw.make_twilio_world(committed_db)
    message_id = tw.sent_message(committed_db, world)
    fields = tw.fixture("status_undelivered.json")

    with connection_lost_at(committed_db, "INSERT INTO webhook_statuses") as killed:
        response = tw.post(client, world.identity_id, fields)
    assert killed
    _, kept_statuses = stored(committed_db)
    assert response.status_code >= 500 or kept_statuses == 1, (
        response.status_code,
        response.get_json(),
    )

    again = tw.post(client, world.identity_id, fields)
    assert again.status_code == 200
    row = state(committed_db, message_id)
    assert row.status == "failed"
    assert row.last_error is not None and row.last_error["code"] == 63016


def test_the_delivery_statement_meeting_a_dead_connection_before_any_status_is_a_503(
    client: FlaskClient, committed_db: Database
) -> None:
    """The step-by-step record: the raw delivery's own insert fails; nothing is kept, no
    2xx (this held before the one-statement record too)."""
    world = make_world(committed_db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)
    sent_message(committed_db, world, "wamid.EARLY1")
    sent_message(committed_db, world, "wamid.EARLY2")
    raw = encode(
        status_body(
            [status("wamid.EARLY1", "delivered", at(5)), status("wamid.EARLY2", "read", at(6))]
        )
    )
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)}
    with connection_lost_at(committed_db, "INSERT INTO webhook_deliveries") as killed:
        response = client.post("/webhooks/whatsapp", data=raw, headers=headers)
    assert killed
    assert response.status_code == 503 and response.headers["Retry-After"] == "2"
    assert stored(committed_db) == (0, 0)


def test_a_connection_lost_while_applying_leaves_the_status_for_the_sweeper_and_the_next_applies(
    app: Flask, client: FlaskClient, committed_db: Database
) -> None:
    """The raw delivery and its statuses are committed first: a status whose apply meets a
    dead connection stays unapplied (2xx is right: it is stored), the request's pinned
    connection reconnects for the next status, and the sweeper replays the first."""
    world = make_world(committed_db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)
    first = sent_message(committed_db, world, "wamid.APPLY1")
    second = sent_message(committed_db, world, "wamid.APPLY2")
    raw = encode(
        status_body(
            [status("wamid.APPLY1", "delivered", at(5)), status("wamid.APPLY2", "read", at(6))]
        )
    )
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)}
    with connection_lost_at(committed_db, "INSERT INTO message_events") as killed:
        response = client.post("/webhooks/whatsapp", data=raw, headers=headers)
    assert killed
    assert response.status_code == 200
    assert response.get_json()["results"] == {"duplicate": 0, "unapplied": 1, "applied": 1}
    assert stored(committed_db) == (1, 2)
    assert (state(committed_db, first).status, state(committed_db, second).status) == (
        "sent",
        "read",
    )
    with committed_db.transaction() as session:
        left = session.scalars(select(WebhookStatus).where(WebhookStatus.applied_at.is_(None)))
        assert [(row.provider_message_id, row.result, row.tries) for row in left] == [
            ("wamid.APPLY1", None, 0)
        ]

    sweep_once(committed_db, app.config["RATCHET"], at(10))
    row = state(committed_db, first)
    assert (row.status, row.delivered_at) == ("delivered", at(5))


@contextmanager
def server_ends_connection_at(database: Database, table: str) -> Iterator[None]:
    """The server ends the connection of the first statement that inserts into `table`
    (a trigger terminating its own backend), with no listener on the engine: the
    statement goes the way it goes in production (to psycopg's cursor directly,
    `DriverStatement`), where `connection_lost_at`'s listener sends it through
    SQLAlchemy's Connection."""
    with database.engine.begin() as connection:
        connection.execute(text("CREATE SEQUENCE test_connection_end"))
        connection.execute(
            text(
                "CREATE FUNCTION test_end_connection() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN IF nextval('test_connection_end') = 1 THEN "
                "PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); "
                "END IF; RETURN NEW; END $$"
            )
        )
        connection.execute(
            text(
                f"CREATE TRIGGER test_end_connection BEFORE INSERT ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION test_end_connection()"
            )
        )
    try:
        yield
    finally:
        with database.engine.begin() as connection:
            connection.execute(text(f"DROP TRIGGER test_end_connection ON {table}"))
            connection.execute(text("DROP FUNCTION test_end_connection()"))
            ended = connection.execute(text("SELECT last_value FROM test_connection_end"))
            assert ended.scalar_one() >= 1  # the statement did meet it
            connection.execute(text("DROP SEQUENCE test_connection_end"))


def test_a_single_status_whose_record_loses_its_connection_is_a_503_and_the_redelivery_applies(
    client: FlaskClient, committed_db: Database
) -> None:
    world = make_world(committed_db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)
    message_id = sent_message(committed_db, world, "wamid.GONE1")
    raw = encode(status_body([status("wamid.GONE1", "delivered", at(5))]))
    with server_ends_connection_at(committed_db, "webhook_statuses"):
        response = deliver(client, raw)
        assert response.status_code == 503
        assert stored(committed_db) == (0, 0)  # one statement: nothing of it stands
        again = deliver(client, raw)
    assert again.status_code == 200 and again.get_json()["results"]["applied"] == 1
    assert state(committed_db, message_id).status == "delivered"


def test_a_single_status_whose_apply_loses_its_connection_is_kept_for_the_sweeper(
    app: Flask, client: FlaskClient, committed_db: Database
) -> None:
    world = make_world(committed_db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)
    message_id = sent_message(committed_db, world, "wamid.GONE2")
    raw = encode(status_body([status("wamid.GONE2", "read", at(6))]))
    with server_ends_connection_at(committed_db, "message_events"):
        response = deliver(client, raw)
        assert response.status_code == 200  # stored: Meta need not send it again
        assert response.get_json()["results"] == {"duplicate": 0, "unapplied": 1}
        assert state(committed_db, message_id).status == "sent"
        # The request's connection was invalidated; the next request's works.
        again = deliver(client, raw)
        assert again.get_json()["results"] == {"duplicate": 1}
    sweep_once(committed_db, app.config["RATCHET"], at(10))
    row = state(committed_db, message_id)
    assert (row.status, row.read_at) == ("read", at(6))
