"""The operations CLI, through Flask's CLI runner: each command does and says what it did
(the identity commands: tests/test_cli_identities.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from flask.testing import FlaskCliRunner
from sqlalchemy import text

from app import migrate
from app.crypto import check_password
from app.db import Database, build_engine
from app.models import AuditEntry, Staff
from app.repo.tenants import authenticate

from .cli_runs import cli, last_line, run
from .conftest import make_app

__all__ = ["cli"]  # the fixture, imported for these tests


def test_db_upgrade_says_the_schema_is_current(cli: FlaskCliRunner) -> None:
    assert "schema already at revision" in run(cli, "db", "upgrade").output


def test_a_failed_db_upgrade_says_where_it_stopped_and_what_is_applied(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    """Each migration commits by itself: a failure leaves the ones before it applied, and
    the command says so, with the database's own words, instead of a traceback."""
    url = f"sqlite:///{tmp_path / 'upgrade.db'}"
    engine = build_engine(url)
    migrate.upgrade(engine, "0011")
    with engine.begin() as connection:  # what 0013 drops is already gone: it will fail
        connection.execute(text("DROP INDEX ix_webhook_statuses_pending"))
    engine.dispose()
    app = make_app(pg_url, redis_url, database_url=url)

    result = app.test_cli_runner().invoke(args=["db", "upgrade"])

    assert result.exit_code == 1, result.output
    assert "the upgrade stopped: no such index: ix_webhook_statuses_pending" in result.output
    latest = migrate.head_revision()
    assert f"schema now at revision 0012 (was 0011; the latest is {latest})" in result.output
    assert "run `db upgrade` again" in result.output
    assert "Traceback" not in result.output
    app.extensions["ratchet.db"].dispose()


def test_tenant_create_prints_a_working_api_key_on_its_last_line(
    cli: FlaskCliRunner, db: Database
) -> None:
    result = run(cli, "tenant", "create", "acme")
    key = last_line(result.output)
    assert "created tenant 'acme'" in result.output
    with db.transaction() as session:
        tenant = authenticate(session, key)
        assert tenant is not None and tenant.name == "acme"
    duplicate = run(cli, "tenant", "create", "acme", ok=False)
    assert duplicate.exit_code != 0 and "already exists" in duplicate.output


def test_staff_create_prints_a_password_that_works(cli: FlaskCliRunner, db: Database) -> None:
    run(cli, "tenant", "create", "acme")
    result = run(
        cli, "staff", "create", "Ana@Example.com", "--role", "operator", "--tenant", "acme"
    )
    password = last_line(result.output)
    platform = run(
        cli,
        "staff",
        "create",
        "root@example.com",
        "--role",
        "admin",
        "--password",
        "chosen-password",
    )
    assert "platform staff" in platform.output and last_line(platform.output) == "chosen-password"
    with db.transaction() as session:
        ana = session.query(Staff).filter_by(email="ana@example.com").one()
        assert ana.tenant_id is not None and ana.role == "operator"
        assert password not in ana.password_hash and check_password(password, ana.password_hash)
    bad = run(cli, "staff", "create", "x@example.com", "--role", "god", ok=False)
    assert bad.exit_code != 0


def test_requeue_is_refused_when_a_refused_delivered_shows_it_reached_the_phone(
    cli: FlaskCliRunner, db: Database
) -> None:

    from app.lifecycle import Source, Status
    from app.repo.claims import claim_message
    from app.repo.failures import record_failed
    from app.repo.transitions import apply_status

    from .conftest import T0
    from .factories import make_message, make_world

    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, timedelta(seconds=25))
        assert claim is not None
        record_failed(
            session,
            claim,
            T0,
            failure_class="permanent",
            error={"code": 131026},
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
        late = apply_status(session, message_id, Status.DELIVERED, Source.WEBHOOK, T0)
        assert late.refusal is not None and late.refusal.value == "failed_is_final"
    refused = run(cli, "message", "requeue", str(message_id), ok=False)
    assert refused.exit_code != 0 and "reported delivered after it failed" in refused.output
    no_reason = run(cli, "message", "requeue", str(message_id), "--force", ok=False)
    assert no_reason.exit_code != 0 and "needs a reason" in no_reason.output
    forced = run(
        cli,
        "message",
        "requeue",
        str(message_id),
        "--by",
        "ana",
        "--force",
        "--reason",
        "customer says it never arrived",
    )
    assert f"requeued message {message_id} by ana as cycle 2" in forced.output
    with db.transaction() as session:
        audit = session.query(AuditEntry).filter_by(action="message.requeue").one()
        assert audit.actor == "ana" and audit.detail["forced"] is True


def test_sweep_once_says_what_it_did(cli: FlaskCliRunner, db: Database) -> None:
    from app.clock import utcnow

    from .factories import make_message, make_world

    world = make_world(db)
    make_message(db, world, now=utcnow())
    make_message(db, world, now=utcnow() - timedelta(minutes=5))
    result = run(cli, "sweep", "--once")
    # Two due messages of one identity and lane: one drain rung for both.
    assert "sweep: rang 1 drains with messages due" in result.output
    assert "sweeper stopped after 1 passes" in result.output
