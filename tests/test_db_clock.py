"""The database's clock (`app/clock.py`, `app/db_clock.py`): a process whose wall clock is
off by 30 s either way still reads PostgreSQL's time from `utcnow()`, and keeps it fresh
on its own connections' checkouts."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.clock import (
    MAX_ROUND_TRIP,
    clock_offset,
    is_offset_older_than,
    measure_offset,
    set_offset,
    utcnow,
)
from app.db import Database, build_engine
from app.db_clock import REFRESH_SECONDS, read_server_clock, sync_clock
from jobs.queues import whole_second_after

from .faketime import skewed

ROOT = Path(__file__).resolve().parent.parent

# Run in a child whose clock is skewed: what its wall clock, `utcnow()` and the server say.
PROBE = """
import json, sys
from datetime import UTC, datetime
from sqlalchemy import text
from app.clock import clock_offset, utcnow
from app.db import Database
from app.db_clock import sync_clock

db = Database(sys.argv[1])
sync_clock(db.engine)
with db.transaction() as session:
    wall = datetime.now(UTC)
    ours = utcnow()
    server = session.scalar(text("SELECT clock_timestamp()"))
print(json.dumps({
    "wall": (wall - server).total_seconds(),
    "ours": (ours - server).total_seconds(),
    "offset": clock_offset().total_seconds(),
}))
"""


@pytest.fixture
def fresh_offset() -> Iterator[None]:
    """The test moves this process's offset; the next checkout measures it again after."""
    yield
    set_offset(timedelta(0), None)


@pytest.mark.parametrize("skew", [30, -30])
def test_a_process_whose_clock_is_off_reads_the_database_clock_from_utcnow(
    pg_url: str, skew: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, pg_url],
        cwd=ROOT,
        env=skewed(os.environ, f"{skew:+d}s"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # Its wall clock really is off (libfaketime took), and its offset undoes it.
    assert seen["wall"] == pytest.approx(skew, abs=1.0)
    assert seen["offset"] == pytest.approx(-skew, abs=1.0)
    assert abs(seen["ours"]) < 0.5


def test_a_stale_offset_is_measured_again_when_a_connection_is_handed_out(
    pg_url: str, fresh_offset: None
) -> None:
    database = Database(pg_url)
    try:
        set_offset(timedelta(hours=1), None)  # never measured: as a process starting
        with database.transaction() as session:
            server = session.scalar(text("SELECT clock_timestamp()"))
            ours = utcnow()
        assert abs((ours - server).total_seconds()) < 0.5
        assert not is_offset_older_than(REFRESH_SECONDS)
        # A fresh offset is left alone: no round trip on every checkout.
        set_offset(timedelta(hours=1), time.monotonic())
        with database.transaction():
            pass
        assert clock_offset() == timedelta(hours=1)
    finally:
        database.dispose()


def test_sync_clock_measures_at_start_and_sqlite_keeps_no_offset(
    pg_url: str, tmp_path: Path, fresh_offset: None
) -> None:
    set_offset(timedelta(minutes=5), None)
    sqlite = build_engine(f"sqlite:///{tmp_path / 'ratchet.db'}")
    try:
        sync_clock(sqlite)
        assert clock_offset() == timedelta(minutes=5)  # nothing to ask
    finally:
        sqlite.dispose()
    engine = build_engine(pg_url)
    try:
        sync_clock(engine)
    finally:
        engine.dispose()
    assert abs(clock_offset()) < timedelta(seconds=0.5)


def test_the_offset_is_the_servers_time_less_the_midpoint_of_the_round_trip(
    fresh_offset: None,
) -> None:
    server = datetime.now(UTC) + timedelta(seconds=42)
    offset = measure_offset(lambda: server)
    assert offset == pytest.approx(timedelta(seconds=42), abs=timedelta(seconds=0.1))
    assert utcnow() - datetime.now(UTC) == pytest.approx(offset, abs=timedelta(seconds=0.1))


def test_a_time_rung_for_later_is_given_to_rq_on_this_processs_wall_clock(
    fresh_offset: None,
) -> None:
    # RQ's scheduler reads the wall clock of a process 30 s behind the database.
    set_offset(timedelta(seconds=30.0004), time.monotonic())
    due = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)
    assert whole_second_after(due) == due - timedelta(seconds=30)
    assert whole_second_after(due + timedelta(milliseconds=300)) == due - timedelta(seconds=29)


def test_a_reading_with_a_slow_round_trip_is_dropped_and_the_offset_kept(
    fresh_offset: None,
) -> None:
    """A stalled answer or a pause of this process inside the read could put the clock off
    by half of it; such a reading is not kept, and the next checkout measures again."""
    set_offset(timedelta(seconds=3), None)
    ticks = iter([100.0, 100.0 + MAX_ROUND_TRIP + 0.1])
    server = datetime.now(UTC) + timedelta(seconds=42)
    assert measure_offset(lambda: server, monotonic=lambda: next(ticks)) is None
    assert clock_offset() == timedelta(seconds=3) and is_offset_older_than(REFRESH_SECONDS)


class CountingPath:
    """A TCP path to PostgreSQL that keeps what the client sends."""

    def __init__(self, host: str, port: int) -> None:
        self.sent = bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = (host, port)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            client, _ = self.listener.accept()
            upstream = socket.create_connection(self.target)
            for source, sink, keep in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(source, sink, keep), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, keep: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if keep:
                    self.sent.extend(data)
                sink.sendall(data)
        source.close()  # one side hung up: the other goes too
        sink.close()

    def close(self) -> None:
        self.listener.close()


def test_reading_the_clock_is_the_statement_alone_outside_a_transaction(pg_url: str) -> None:
    """One round trip timed: no BEGIN before the statement, no ROLLBACK after it."""
    url = make_url(pg_url)
    path = CountingPath(url.host or "127.0.0.1", url.port or 5432)
    dsn = f"host=127.0.0.1 port={path.port} dbname={url.database} user={url.username or 'postgres'}"
    try:
        with psycopg.connect(dsn) as connection:
            before = len(path.sent)
            moment = read_server_clock(connection)
            sent = bytes(path.sent[before:])
            assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert not connection.autocommit  # as it was
    finally:
        path.close()
    assert abs((moment - datetime.now(UTC)).total_seconds()) < 5
    assert b"clock_timestamp" in sent and b"BEGIN" not in sent and b"ROLLBACK" not in sent


KEEPER = """
import sys, time
from datetime import timedelta
from app.clock import clock_offset, set_offset
from app.db import Database
from app.db_clock import start_clock_keeper

db = Database(sys.argv[1])
start_clock_keeper(db.engine, every=0.05)
# Wrong by an hour and stale, as after a wall-clock step while the process sat idle: the
# keeper measures again with no checkout of ours.
set_offset(timedelta(hours=1), time.monotonic() - 3600)
deadline = time.monotonic() + 20
while clock_offset() > timedelta(seconds=1) and time.monotonic() < deadline:
    time.sleep(0.05)
print(clock_offset().total_seconds())
"""


def test_the_keeper_measures_a_stale_offset_again_with_no_checkout(pg_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KEEPER, pg_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert abs(float(done.stdout)) < 1.0, done.stdout
