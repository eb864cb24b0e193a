"""The charts' rollup: the day's and the week's charts read their closed buckets from
`chart_rollups` and show exactly what aggregating the messages now shows, after folding
twice, after a late delivery lands in a closed bucket, and after a requeue clears a failed
cycle's times; on PostgreSQL and on SQLite."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from flask import Flask
from sqlalchemy import delete, func, select

from app import migrate
from app.correlation import derive_key
from app.db import Database
from app.lifecycle import Source, Status
from app.models import ChartFoldMark, ChartRollup, Message
from app.repo.chart_rollup import BATCH, fold_charts, read_rollup
from app.repo.charts import Series, read_series
from app.repo.requeues import requeue_message
from app.repo.transitions import apply_status
from jobs.sweep import sweep_once

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_message, make_world
from ..views.chart_traffic import at
from ..views.dashboard_world import failed_message, sent_message

NOW = T0 + timedelta(days=3, minutes=7)
RANGES = ("day", "week")


def deliver(
    database: Database,
    message_id: int,
    minute: int,
    *,
    received: int | None = None,
    status: Status = Status.DELIVERED,
) -> None:
    """A webhook's status with the provider's time `minute`, received at `received`."""
    with database.transaction() as session:
        apply_status(
            session,
            message_id,
            status,
            Source.WEBHOOK,
            at(minute if received is None else received),
            provider_time=at(minute),
        )


def three_days_of_traffic(database: Database, world: World, other: World) -> dict[str, int]:
    """Sends, deliveries, reads and failures spread over three days on two identities,
    and two messages still waiting."""
    sends = {}
    for n, minute in enumerate([30, 95, 1450, 2900, 3000, 3500, 4200, 4300]):
        sends[minute] = sent_message(
            database, world if n % 3 else other, f"wamid.{n}", minute=minute
        )
    for minute in (30, 1450, 2900, 3000, 4200):
        deliver(database, sends[minute], minute + 2)
    for minute in (1450, 3000):
        deliver(database, sends[minute], minute + 9, status=Status.READ)
    failed = {m: failed_message(database, world, minute=m) for m in (100, 2950, 4250)}
    failed[2960] = failed_message(database, other, minute=2960)
    make_message(database, world, now=at(3100))
    make_message(database, other, now=at(4315))
    return {"sent_3000": sends[3000], "sent_3500": sends[3500], "failed_2950": failed[2950]}


def fold_all(database: Database, now: datetime) -> int:
    """Sweeper passes until nothing is left to fold; the number of passes."""
    for passes in range(1, 200):
        with database.transaction() as session:
            if fold_charts(session, now).new == 0:
                return passes
    raise AssertionError("the fold never finished")


def both(
    database: Database, ids: list[int], now: datetime, range_name: str
) -> tuple[Series, Series]:
    """The chart as the rollup answers it, and as aggregating every message answers it
    (the marks hidden in a savepoint rolled back)."""
    with database.transaction() as session:
        rolled = read_series(session, ids, now, range_name)
        savepoint = session.begin_nested()
        session.execute(delete(ChartFoldMark))
        live = read_series(session, ids, now, range_name)
        savepoint.rollback()
    return rolled, live


def assert_rolled_up(database: Database, ids: list[int], now: datetime) -> None:
    for range_name in RANGES:
        rolled, live = both(database, ids, now, range_name)
        assert rolled == live, range_name
        # And the rollup did answer: every closed bucket of the range came from it.
        width = int(rolled.bucket.total_seconds())
        first = int(rolled.start.timestamp()) // width
        with database.transaction() as session:
            tail, _ = read_rollup(session, ids, width, first)
        assert tail == (int(now.timestamp()) - 30) // width


def test_the_folded_charts_show_what_the_messages_show_on_postgresql(db: Database) -> None:
    world = make_world(db)
    other = make_world(db, name="other", account_id="2000002", verify_token="verify-o")
    three_days_of_traffic(db, world, other)
    ids = [world.identity_id, other.identity_id]
    assert fold_all(db, NOW) > 1  # a week of buckets is folded a batch a pass
    for chosen in (ids, [world.identity_id], [other.identity_id]):
        assert_rolled_up(db, chosen, NOW)
    day, _ = both(db, ids, NOW, "day")
    assert sum(day.sent) == 5 and sum(day.failed) == 3 and sum(day.read) == 1
    assert day.waiting_now == 2


def test_folding_again_replaces_a_bucket_and_never_counts_it_twice(db: Database) -> None:
    world = make_world(db)
    other = make_world(db, name="other", account_id="2000002", verify_token="verify-o")
    three_days_of_traffic(db, world, other)
    ids = [world.identity_id, other.identity_id]
    fold_all(db, NOW)
    with db.transaction() as session:
        before = session.scalar(select(func.sum(ChartRollup.sent)))
        # The marks set back: every bucket of the week is folded a second time.
        session.execute(delete(ChartFoldMark))
    fold_all(db, NOW)
    with db.transaction() as session:
        assert session.scalar(select(func.sum(ChartRollup.sent))) == before
    assert_rolled_up(db, ids, NOW)


def test_a_late_delivery_into_a_closed_bucket_is_folded_in_by_the_next_pass(
    db: Database,
) -> None:
    world = make_world(db)
    other = make_world(db, name="other", account_id="2000002", verify_token="verify-o")
    made = three_days_of_traffic(db, world, other)
    ids = [world.identity_id, other.identity_id]
    fold_all(db, NOW)
    # Received a minute after the pass, dated by the provider in a bucket folded long ago.
    later = NOW + timedelta(minutes=1)
    deliver(db, made["sent_3500"], 3502, received=int((later - T0).total_seconds() // 60))
    rolled, live = both(db, ids, later, "day")
    assert rolled != live  # the rollup is behind until the sweeper's next pass
    with db.transaction() as session:
        fold_charts(session, later)
    assert_rolled_up(db, ids, later)
    rolled, _ = both(db, ids, later, "day")
    bucket = rolled.starts.index(at(3495))  # 15-minute buckets: 3495 to 3510
    assert rolled.delivered[bucket] == 1 and rolled.delivered_rate[bucket] == 1.0


def test_a_requeue_takes_the_failed_cycle_out_of_the_closed_buckets_it_was_in(
    db: Database,
) -> None:
    world = make_world(db)
    other = make_world(db, name="other", account_id="2000002", verify_token="verify-o")
    made = three_days_of_traffic(db, world, other)
    ids = [world.identity_id, other.identity_id]
    fold_all(db, NOW)
    rolled, _ = both(db, ids, NOW, "day")
    assert rolled.failed[rolled.starts.index(at(2940))] == 1  # 2950, in 2940 to 2955
    later = NOW + timedelta(minutes=2)
    with db.transaction() as session:
        requeue_message(session, made["failed_2950"], later, actor="ops@acme.test")
        assert session.get(Message, made["failed_2950"]).failed_at is None
    with db.transaction() as session:
        fold_charts(session, later)
    assert_rolled_up(db, ids, later)
    rolled, _ = both(db, ids, later, "day")
    assert rolled.failed[rolled.starts.index(at(2940))] == 0  # requeued: not failed there
    assert rolled.failed[rolled.starts.index(at(2955))] == 1  # 2960's, another identity


def test_the_folded_charts_show_what_the_messages_show_on_sqlite(
    app: Flask, tmp_path: Path
) -> None:
    database = Database(
        f"sqlite:///{tmp_path / 'ratchet.db'}", correlation_key=derive_key(SECRET_KEY)
    )
    migrate.upgrade(database.engine)
    try:
        world = make_world(database)
        other = make_world(database, name="other", account_id="2000002", verify_token="verify-o")
        three_days_of_traffic(database, world, other)
        ids = [world.identity_id, other.identity_id]
        with database.transaction() as session:
            live = {r: read_series(session, ids, NOW, r) for r in RANGES}
        fold_all(database, NOW)
        fold_all(database, NOW)
        with database.transaction() as session:
            for range_name in RANGES:
                assert read_series(session, ids, NOW, range_name) == live[range_name]
            assert session.scalar(select(func.count()).select_from(ChartRollup)) > 0
    finally:
        database.dispose()


def test_each_sweeper_pass_folds_the_next_closed_buckets(app: Flask, db: Database) -> None:
    world = make_world(db)
    sent_message(db, world, "wamid.1", minute=4300)
    first = sweep_once(db, app.config["RATCHET"], NOW)
    assert first.chart_buckets == 2 * BATCH  # the oldest of the week, both widths
    assert "folded 48 chart buckets" in first.describe()
    with db.transaction() as session:
        marks = {m.width: m.folded_to for m in session.scalars(select(ChartFoldMark))}
    assert marks == {
        width: (int(NOW.timestamp()) // width - 7 * 86400 // width - 1) + BATCH
        for width in (900, 3600)
    }


def test_a_bucket_that_leaves_the_week_leaves_the_rollup(db: Database) -> None:
    world = make_world(db)
    sent_message(db, world, "wamid.old", minute=0)
    fold_all(db, NOW)
    with db.transaction() as session:
        assert session.scalar(select(func.sum(ChartRollup.sent))) == 2  # an hour and a quarter
    fold_all(db, T0 + timedelta(days=8, hours=2))
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(ChartRollup)) == 0
