"""The record of a provider's answer survives a database connection whose network path
died silently during the call (a NAT or a load balancer forgetting the flow, a virtual IP
moving): the record's unit of work pings the connection it is handed, however recently it
was used, so an accepted send is recorded as sent instead of becoming an unknown outcome
(`jobs/send.py`, `Database.transaction(ping=True)`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select

from app.db import Database
from app.models import Attempt
from jobs.send import send_one

from ..connection_faults import ForgetfulPath, path, through
from .conftest import Env

__all__ = ["path"]  # the fixture, imported for these tests


@pytest.fixture
def forgetful_db(pg_url: str, path: ForgetfulPath, env: Env) -> Iterator[Database]:
    """The worker's database through that path: one connection, never pinged for
    idleness (the claim uses it moments before the record)."""
    database = Database(
        through(pg_url, path),
        correlation_key=env.db.info["correlation_key"],
        pool_size=1,
        max_overflow=0,
        ping_after_idle=3600.0,
    )
    yield database
    database.dispose()


def test_an_accepted_send_is_recorded_though_its_connection_died_silently_during_the_call(
    env: Env, path: ForgetfulPath, forgetful_db: Database
) -> None:
    number = env.number()
    message_id = env.send(number, "15551230000")

    def forget(*_: Any) -> None:
        path.forget()  # the claim's connection is back in the pool: the call is next

    event.listen(forgetful_db.engine, "checkin", forget, once=True)
    send_one(forgetful_db, env.box, env.config, message_id, env.clock)

    accepted = env.accepted(number)
    assert len(accepted) == 1  # sent once
    row = env.message(message_id)
    assert row.status != "sending" and row.unknown_attempts == 0
    assert row.provider_message_id == accepted[0]["wamid"]
    with env.db.transaction() as session:
        attempts = session.scalars(select(Attempt).where(Attempt.message_id == message_id)).all()
    assert [(a.outcome, a.provider_message_id) for a in attempts] == [
        ("accepted", accepted[0]["wamid"])
    ]
