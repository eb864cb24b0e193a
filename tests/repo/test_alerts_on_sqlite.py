"""The evaluator on SQLite, which `make run` uses without DATABASE_URL: the same queries
fire and clear a stuck lane there."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

from flask import Flask

from app import migrate
from app.correlation import derive_key
from app.db import Database
from app.repo.alerts import firing_alerts
from app.repo.claims import claim_message
from jobs.alerts import AlertEvaluator

from ..conftest import SECRET_KEY, T0
from ..factories import make_message, make_world


def test_a_stuck_lane_fires_and_clears_on_sqlite(app: Flask, tmp_path: Path) -> None:
    database = Database(
        f"sqlite:///{tmp_path / 'ratchet.db'}", correlation_key=derive_key(SECRET_KEY)
    )
    migrate.upgrade(database.engine)
    config = dataclasses.replace(app.config["RATCHET"], stuck_after=60.0)
    evaluator = AlertEvaluator(database, config)
    try:
        world = make_world(database)
        message_id = make_message(database, world, lane="campaign", now=T0)
        evaluator.run(T0 + timedelta(seconds=61))
        with database.transaction() as session:
            assert [a.alert_key for a in firing_alerts(session)] == [
                f"stuck:{world.identity_id}:campaign"
            ]
            assert claim_message(session, message_id, T0 + timedelta(seconds=62), timedelta(25))
        evaluator.run(T0 + timedelta(seconds=70))
        with database.transaction() as session:
            assert firing_alerts(session) == []
    finally:
        evaluator.close()
        database.dispose()
