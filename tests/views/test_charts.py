"""The charts: per-bucket aggregates over the window (on PostgreSQL and on SQLite, which
`make run` uses), and the page that draws them as SVG for one identity or a tenant."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app import migrate
from app.correlation import derive_key
from app.db import Database
from app.repo.charts import read_series

from ..conftest import SECRET_KEY
from ..factories import World, make_world
from .chart_traffic import an_hour_of_traffic, at
from .dashboard_world import NOW, Tenants, make_staff, sign_in, use_clock


def assert_the_hour(database: Database, world: World) -> None:
    with database.transaction() as session:
        series = read_series(session, [world.identity_id], NOW, "hour")
    index = {start: i for i, start in enumerate(series.starts)}
    assert len(series.starts) == 60 and series.starts[-1] == NOW
    assert series.sent[index[at(2)]] == 3 and series.sent[index[at(5)]] == 1
    assert sum(series.sent) == 4
    assert series.delivered[index[at(3)]] == 2 and sum(series.delivered) == 2
    assert series.read[index[at(4)]] == 1 and sum(series.read) == 1
    assert series.failed[index[at(6)]] == 1 and sum(series.failed) == 1
    assert series.delivered_rate[index[at(2)]] == pytest.approx(2 / 3)
    assert series.delivered_rate[index[at(5)]] == 0.0
    assert series.delivered_rate[index[at(4)]] is None  # nothing sent then
    assert series.waiting_now == 2
    assert series.waiting[index[at(0)]] == 0
    assert series.waiting[index[at(1)]] == 1 and series.waiting[index[at(7)]] == 1
    assert series.waiting[index[at(8)]] == 2 and series.waiting[-1] == 2
    assert series.longest_wait[index[at(2)]] == 0.0
    assert series.dead_by_class == [("needs_human", 1)]


def test_the_hour_is_counted_per_minute_on_postgresql(db: Database) -> None:
    world = make_world(db)
    an_hour_of_traffic(db, world)
    assert_the_hour(db, world)


def test_the_hour_is_counted_per_minute_on_sqlite(app: Flask, tmp_path: Path) -> None:
    database = Database(
        f"sqlite:///{tmp_path / 'ratchet.db'}", correlation_key=derive_key(SECRET_KEY)
    )
    migrate.upgrade(database.engine)
    try:
        world = make_world(database)
        an_hour_of_traffic(database, world)
        assert_the_hour(database, world)
    finally:
        database.dispose()


def test_a_week_is_drawn_in_hours_and_a_day_in_quarter_hours(db: Database) -> None:
    world = make_world(db)
    with db.transaction() as session:
        week = read_series(session, [world.identity_id], NOW, "week")
        day = read_series(session, [world.identity_id], NOW, "day")
    assert len(week.starts) == 168 and week.bucket == timedelta(hours=1)
    assert len(day.starts) == 96 and day.bucket == timedelta(minutes=15)


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def test_the_page_draws_each_chart_as_an_svg_a_screen_reader_can_name(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    an_hour_of_traffic(db, tenants.acme)
    page = client.get(f"/charts?identity={tenants.acme.identity_id}&range=hour")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert html.count('<svg class="chart"') == 4
    assert 'role="img"' in html and '<title id="outcomes-t">Messages per 1 m' in html
    assert "sent: highest 3, last 0, total 4" in html
    assert "needs_human" in html and "<script" not in html.split("<main", 1)[1].split("</main>")[0]
    # Another tenant's identity is not there to chart.
    assert client.get(f"/charts?identity={tenants.other.identity_id}").status_code == 404
    # The whole tenant by default.
    assert client.get("/charts?range=week").status_code == 200
