"""A process stopped inside a transaction (SIGSTOP, a frozen VM) holds its locks only for a
bounded time (`app/db.py`): PostgreSQL's idle-in-transaction timeout ends its session, and
where a psycopg pipeline disarmed that timer, the sweeper's pass does.

Found by review: a drain frozen between its claim and the claim's commit kept the share
lock on its identity and the row locks on what it claimed for as long as it stayed frozen.
Every other drain skipped those rows, and an operator's `identity pause` waited, for hours
if need be. Now the frozen session is ended: its claim rolls back (the messages are due
again, no attempt counted), the pause goes through, and the frozen process, once it
wakes, finds its transaction gone and sends nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest
from flask import Flask
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.db import Database
from app.models import Identity, Message
from app.repo import identity_actions
from app.repo.claims import claim_batch
from app.repo.identities import get_identity
from jobs.sweep import sweep_once

from ..conftest import T0
from ..factories import World, make_message, make_world

LEASE = timedelta(seconds=25)
LIMIT = 1.0  # seconds idle in a transaction before the session is ended


def start_pause(database: Database, world: World) -> threading.Event:
    """An operator pauses the identity, in another thread; the event is set once it is."""
    paused = threading.Event()

    def pause() -> None:
        with database.transaction() as session:
            identity = session.get(Identity, world.identity_id)
            assert identity is not None
            identity_actions.pause(
                session,
                identity,
                scope=identity_actions.WHOLE,
                reason="provider incident",
                actor="ops@example.com",
                now=T0 + timedelta(seconds=1),
                via="cli",
            )
        paused.set()

    threading.Thread(target=pause, daemon=True).start()
    return paused


def idle_in_transaction_for(database: Database, pid: int) -> float:
    with database.engine.connect() as connection:
        seconds = connection.execute(
            text(
                "SELECT extract(epoch FROM clock_timestamp() - state_change) FROM"
                " pg_stat_activity WHERE pid = :pid AND state LIKE 'idle in transaction%'"
            ),
            {"pid": pid},
        ).scalar()
    return float(seconds or 0.0)


def frozen_claim(
    committed_db: Database, pg_url: str, then: Callable[[Session, World], None]
) -> tuple[World, list[int], Database, Session, int]:
    world = make_world(committed_db)
    ids = [make_message(committed_db, world, recipient=f"155512300{n:02d}") for n in range(3)]
    frozen_db = Database(pg_url, idle_in_transaction=LIMIT)
    frozen = frozen_db.sessions()
    pid = frozen.execute(text("SELECT pg_backend_pid()")).scalar_one()
    claims = claim_batch(frozen, world.identity_id, "campaign", 3, T0, LEASE)
    assert [c.message_id for c in claims] == ids
    then(frozen, world)
    # ... and the process stops here, before its commit.
    return world, ids, frozen_db, frozen, pid


def woken_and_rolled_back(
    committed_db: Database, frozen_db: Database, frozen: Session, world: World, ids: list[int]
) -> None:
    # The frozen process wakes: its transaction is gone, its claim was never committed.
    with pytest.raises(DBAPIError):
        frozen.commit()
    with committed_db.transaction() as session:
        rows = session.execute(
            select(Message.status, Message.attempt).where(Message.id.in_(ids)).order_by(Message.id)
        ).all()
        identity = session.get(Identity, world.identity_id)
        assert identity is not None and identity.paused_at is not None
    assert [tuple(row) for row in rows] == [("queued", 0)] * 3


def test_a_claim_frozen_before_its_commit_is_ended_by_the_server_and_lets_a_pause_through(
    committed_db: Database, pg_url: str
) -> None:
    # As a drain does next: it reads the identity again, then prepares each message.
    world, ids, frozen_db, frozen, _ = frozen_claim(
        committed_db, pg_url, lambda session, w: get_identity(session, w.identity_id) and None
    )
    try:
        paused = start_pause(committed_db, world)
        # Without the timeout the pause waits for as long as the claim stays frozen; the
        # limit only bounds the test.
        assert paused.wait(timeout=60), "the pause waited for the frozen claim"
        woken_and_rolled_back(committed_db, frozen_db, frozen, world, ids)
    finally:
        frozen.close()  # a test that failed: the frozen session would block the teardown
        frozen_db.dispose()


def test_a_session_stalled_past_the_limit_after_a_pipeline_is_ended_by_the_sweeper(
    committed_db: Database, pg_url: str, app: Flask
) -> None:
    # Frozen right after the claim's last statement, an executemany (psycopg runs it as a
    # pipeline, whose closing Flush may leave the server's timer disarmed).
    world, ids, frozen_db, frozen, pid = frozen_claim(committed_db, pg_url, lambda session, w: None)
    try:
        paused = start_pause(committed_db, world)
        deadline = time.monotonic() + 60
        while not paused.is_set() and idle_in_transaction_for(committed_db, pid) <= LIMIT:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        config = replace(app.config["RATCHET"], db_idle_in_transaction=LIMIT)
        with app.app_context():
            swept = sweep_once(committed_db, config, T0 + timedelta(seconds=2))
        print(f"ended by the sweeper: {swept.stalled_sessions}")
        # The server's timer may have got there first; either way the session is gone.
        assert swept.stalled_sessions == 1 or paused.is_set()
        assert paused.wait(timeout=60), "the pause waited for the stalled claim"
        woken_and_rolled_back(committed_db, frozen_db, frozen, world, ids)
    finally:
        frozen.close()
        frozen_db.dispose()


def test_the_limit_is_a_setting_and_the_environment_s_and_a_url_s_own_options_win(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.config import Config, ConfigError

    from ..conftest import SECRET_KEY

    env = {"SECRET_KEY": SECRET_KEY, "RATCHET_DB_IDLE_IN_TRANSACTION": "2.5"}
    assert Config.from_env(env).db_idle_in_transaction == 2.5
    assert (
        Config.from_env({**env, "RATCHET_DB_IDLE_IN_TRANSACTION": "0"}).db_idle_in_transaction == 0
    )
    for wrong in ("-1", "0.0001", "never"):
        with pytest.raises(ConfigError, match="RATCHET_DB_IDLE_IN_TRANSACTION"):
            Config.from_env({**env, "RATCHET_DB_IDLE_IN_TRANSACTION": wrong})

    def settings(url: str, limit: float = 2.5) -> tuple[str, ...]:
        database = Database(url, idle_in_transaction=limit)
        try:
            with database.engine.connect() as connection:
                row = connection.execute(
                    text(
                        "SELECT current_setting('idle_in_transaction_session_timeout'),"
                        " current_setting('application_name'),"
                        " current_setting('statement_timeout')"
                    )
                ).one()
        finally:
            database.dispose()
        return tuple(row)

    assert settings(pg_url) == ("2500ms", "ratchet", "0")
    own = f"{pg_url}?application_name=other&options=-cidle_in_transaction_session_timeout%3D7s"
    assert settings(own) == ("7s", "other", "0")
    # libpq's PGOPTIONS is kept (an explicit `options` would otherwise replace it).
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=5s")
    assert settings(pg_url) == ("2500ms", "ratchet", "5s")
    # 0: no option sent at all (a pooler that refuses them), and the sweeper ends nothing.
    monkeypatch.delenv("PGOPTIONS")
    assert settings(pg_url, limit=0) == ("0", "ratchet", "0")
