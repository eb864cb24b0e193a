"""`alerts ...` through Flask's CLI runner."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from app.clock import utcnow
from app.db import Database
from app.models import AuditEntry, Identity

from .factories import make_message, make_world


@pytest.fixture
def cli(app: Flask, db: Database) -> FlaskCliRunner:
    return app.test_cli_runner()


def test_stuck_after_sets_an_identitys_own_threshold_and_default_restores_it(
    cli: FlaskCliRunner, db: Database
) -> None:
    world = make_world(db)
    result = cli.invoke(args=["alerts", "stuck-after", str(world.identity_id), "300"])
    assert result.exit_code == 0, result.output
    assert f"identity {world.identity_id}: stuck after 300 s" in result.output
    with db.transaction() as session:
        assert session.get(Identity, world.identity_id, populate_existing=True).stuck_after == 300
        audit = session.scalars(select(AuditEntry)).one()
        assert audit.action == "identity.stuck_after" and audit.detail == {"stuck_after": 300.0}
    result = cli.invoke(args=["alerts", "stuck-after", str(world.identity_id), "default"])
    assert "stuck after the default (60 s)" in result.output
    with db.transaction() as session:
        assert session.get(Identity, world.identity_id, populate_existing=True).stuck_after is None


@pytest.mark.parametrize("bad", ["soon", "0", "-5"])
def test_stuck_after_refuses_what_is_not_a_positive_number_and_changes_nothing(
    cli: FlaskCliRunner, db: Database, bad: str
) -> None:
    world = make_world(db)
    result = cli.invoke(args=["alerts", "stuck-after", str(world.identity_id), "--", bad])
    assert result.exit_code != 0
    with db.transaction() as session:
        assert session.get(Identity, world.identity_id, populate_existing=True).stuck_after is None


def test_evaluate_fires_a_stuck_lane_and_list_shows_it(cli: FlaskCliRunner, db: Database) -> None:
    world = make_world(db)
    make_message(db, world, lane="campaign", now=utcnow() - timedelta(minutes=5))
    result = cli.invoke(args=["alerts", "evaluate"])
    assert result.exit_code == 0, result.output
    assert f"fired: stuck:{world.identity_id}:campaign" in result.output
    listed = cli.invoke(args=["alerts", "list"]).output
    assert "Queue stuck" in listed and "1 alert firing" in listed
