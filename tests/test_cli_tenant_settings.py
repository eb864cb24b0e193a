"""`tenant settings`: shows a tenant's limits and retention, changes them, audits it."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Tenant

from .factories import World, make_world


@pytest.fixture
def cli(app: Flask, db: Database) -> FlaskCliRunner:
    return app.test_cli_runner()


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


def tenant(db: Database, world: World) -> Tenant:
    with db.transaction() as session:
        row = session.get(Tenant, world.tenant_id, populate_existing=True)
        assert row is not None
        return row


def test_without_options_it_shows_the_defaults(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(args=["tenant", "settings", "acme"])
    assert result.exit_code == 0, result.output
    assert "requests per second: no limit; messages waiting: no limit; content kept 30 days" in (
        result.output
    )


def test_it_sets_and_lifts_limits_keeping_what_is_not_given(
    cli: FlaskCliRunner, world: World, db: Database
) -> None:
    result = cli.invoke(
        args=["tenant", "settings", "acme", "--requests-per-second", "25", "--max-waiting", "500"]
    )
    assert result.exit_code == 0, result.output
    assert "now: requests per second: 25; messages waiting: 500; content kept 30 days" in (
        result.output
    )
    result = cli.invoke(
        args=["tenant", "settings", "acme", "--max-waiting", "none", "--retention-days", "7"]
    )
    assert result.exit_code == 0, result.output
    row = tenant(db, world)
    assert (row.max_requests_per_second, row.max_waiting, row.retention_days) == (25, None, 7)
    with db.transaction() as session:
        actions = session.scalars(
            select(AuditEntry.action).where(AuditEntry.target == f"tenant:{world.tenant_id}")
        ).all()
    assert actions == ["tenant_settings", "tenant_settings"]


@pytest.mark.parametrize(
    "args",
    [
        ["--requests-per-second", "0"],
        ["--requests-per-second", "fast"],
        ["--max-waiting", "-3"],
        ["--retention-days", "0"],
    ],
)
def test_bad_values_change_nothing(
    cli: FlaskCliRunner, world: World, db: Database, args: list[str]
) -> None:
    result = cli.invoke(args=["tenant", "settings", "acme", *args])
    assert result.exit_code != 0
    row = tenant(db, world)
    assert (row.max_requests_per_second, row.max_waiting, row.retention_days) == (None, None, 30)


def test_an_unknown_tenant_is_named(cli: FlaskCliRunner, world: World) -> None:
    result = cli.invoke(args=["tenant", "settings", "nobody", "--max-waiting", "5"])
    assert result.exit_code == 1 and "no tenant named 'nobody'" in result.output
