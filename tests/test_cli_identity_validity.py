"""`identity validity`: shows each lane's default validity, sets and lifts it, audits it,
refuses a bad value with nothing stored."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Identity

from .factories import World, make_world


@pytest.fixture
def cli(app: Flask, db: Database) -> FlaskCliRunner:
    return app.test_cli_runner()


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


def validity(cli: FlaskCliRunner, world: World, *options: str, ok: bool = True) -> str:
    result = cli.invoke(args=["identity", "validity", str(world.identity_id), *options])
    assert (result.exit_code == 0) is ok, result.output
    return result.output


def stored(db: Database, world: World) -> tuple[int | None, int | None]:
    with db.transaction() as session:
        row = session.get(Identity, world.identity_id, populate_existing=True)
        assert row is not None
        return row.reply_valid_for, row.campaign_valid_for


def audited(db: Database, world: World) -> list[object]:
    with db.transaction() as session:
        return list(
            session.scalars(
                select(AuditEntry.detail)
                .where(
                    AuditEntry.action == "identity.default_validity",
                    AuditEntry.target == f"identity:{world.identity_id}",
                )
                .order_by(AuditEntry.id)
            )
        )


def test_without_options_it_shows_no_limit_on_either_lane(
    cli: FlaskCliRunner, world: World
) -> None:
    assert "default validity: reply lane no limit; campaign lane no limit" in validity(cli, world)


def test_it_sets_one_lane_keeping_the_other_and_audits_what_changed(
    cli: FlaskCliRunner, world: World, db: Database
) -> None:
    output = validity(cli, world, "--reply", "10m", "--campaign", "86400")
    assert "now: reply lane 10 min; campaign lane 1 d (was: reply lane no limit;" in output
    output = validity(cli, world, "--campaign", "none")
    assert "now: reply lane 10 min; campaign lane no limit (was: reply lane 10 min;" in output
    assert stored(db, world) == (600, None)
    details = audited(db, world)
    assert details == [
        {
            "validity": {
                "reply": {"before": None, "after": 600},
                "campaign": {"before": None, "after": 86400},
            },
            "via": "cli",
        },
        {"validity": {"campaign": {"before": 86400, "after": None}}, "via": "cli"},
    ]
    # The same values again change nothing and add no audit row.
    assert "unchanged" in validity(cli, world, "--reply", "600")
    assert len(audited(db, world)) == 2
    assert "reply lane 10 min; campaign lane no limit" in validity(cli, world)


@pytest.mark.parametrize("bad", ["0", "36d", "3024001", "soon", "-1", "2.5h"])
def test_a_bad_value_is_refused_and_stores_nothing(
    cli: FlaskCliRunner, world: World, db: Database, bad: str
) -> None:
    output = validity(cli, world, "--reply", "10m", "--campaign", bad, ok=False)
    assert "nothing changed" in output
    assert stored(db, world) == (None, None)
    assert audited(db, world) == []


def test_an_unknown_identity_is_an_error(cli: FlaskCliRunner, db: Database) -> None:
    result = cli.invoke(args=["identity", "validity", "999999", "--reply", "60"])
    assert result.exit_code != 0 and "no identity with id 999999" in result.output
