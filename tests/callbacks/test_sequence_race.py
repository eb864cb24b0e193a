"""Two changes of one message racing: the second waits on the row lock the first's UPDATE
holds, and takes its sequence only after the first commits, so the numbers are distinct
and follow the commit order."""

from __future__ import annotations

import threading
import time

from flask import Flask
from sqlalchemy import text

from app.db import Database
from app.lifecycle import Source, Status
from app.repo.transitions import apply_status

from ..factories import make_world
from .conftest import add_endpoint, at, outbox, sent_message
from .receiver import Receiver


def waiting_on_a_lock(db: Database) -> bool:
    with db.engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
    return bool(found)


def test_a_change_racing_another_of_the_same_message_takes_the_next_sequence(
    app: Flask, committed_db: Database
) -> None:
    db = committed_db
    world = make_world(db)
    add_endpoint(db, world, Receiver(port=9))
    message_id = sent_message(db, world, "wamid.R1")  # sequence 1
    first = db.engine.connect()
    first.begin()
    first.execute(  # delivered, its outbox row written; not committed yet
        text("UPDATE messages SET status = 'delivered', delivered_at = :at WHERE id = :id"),
        {"id": message_id, "at": at(5)},
    )

    def read() -> None:
        with db.transaction() as session:
            apply_status(session, message_id, Status.READ, Source.WEBHOOK, at(6))

    second = threading.Thread(target=read)
    second.start()
    deadline = time.monotonic() + 10
    while not waiting_on_a_lock(db):  # the read waits on the delivered's row lock
        assert time.monotonic() < deadline, "the second change never waited"
        time.sleep(0.02)
    first.commit()
    first.close()
    second.join(10)
    rows = outbox(db)
    assert [(row.event, row.sequence) for row in rows] == [
        ("message.sent", 1),
        ("message.delivered", 2),
        ("message.read", 3),
    ]
