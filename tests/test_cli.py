"""The operations CLI, through Flask's CLI runner: each command does and says what it did."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select, text

from app import migrate
from app.crypto import SecretBox, check_password
from app.db import Database, build_engine
from app.models import AuditEntry, Identity, Staff
from app.providers import PROVIDERS
from app.repo.tenants import authenticate

from .conftest import SECRET_KEY, make_app


@pytest.fixture
def cli(app: Flask, db: Database) -> FlaskCliRunner:
    return app.test_cli_runner()


def run(cli: FlaskCliRunner, *args: str, ok: bool = True):
    result = cli.invoke(args=list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1]


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


PROVIDER_ARGS = {
    "whatsapp": [
        "--account-id",
        "106540352242922",
        "--base-url",
        "https://graph.facebook.com/v21.0/",
        "--app-secret",
        "s3cret",
        "--verify-token",
        "vt",
    ],
    "messenger": [
        "--account-id",
        "PAGE1",
        "--base-url",
        "https://graph.facebook.com/v21.0",
        "--app-secret",
        "s3cret",
        "--verify-token",
        "vt",
    ],
    "instagram": [
        "--account-id",
        "IG1",
        "--base-url",
        "https://graph.facebook.com/v21.0",
        "--app-secret",
        "s3cret",
    ],
    "twilio": [
        "--account-id",
        "AC123",
        "--base-url",
        "https://api.twilio.com",
        "--from",
        "whatsapp:+15550001111",
    ],
}


BUILT_PROVIDERS = [name for name in PROVIDER_ARGS if name in PROVIDERS]
UNBUILT_PROVIDERS = [name for name in PROVIDER_ARGS if name not in PROVIDERS]


def test_every_provider_the_cli_offers_can_send() -> None:
    # The CLI's choices and the provider registry agree: no identity it creates waits for ever.
    assert UNBUILT_PROVIDERS == [] and sorted(BUILT_PROVIDERS) == sorted(PROVIDERS)


def test_identity_create_refuses_a_provider_it_does_not_know_and_stores_nothing(
    cli: FlaskCliRunner, db: Database
) -> None:
    run(cli, "tenant", "create", "acme")
    result = run(
        cli,
        "identity",
        "create",
        "--tenant",
        "acme",
        "--provider",
        "telegram",
        "--token",
        "tok-123456789",
        *PROVIDER_ARGS["whatsapp"],
        ok=False,
    )
    assert result.exit_code != 0
    assert "telegram" in result.output and "whatsapp" in result.output
    with db.transaction() as session:
        assert session.scalars(select(Identity)).all() == []


@pytest.mark.parametrize("provider", BUILT_PROVIDERS)
def test_identity_create_stores_every_built_providers_options_with_secrets_encrypted(
    cli: FlaskCliRunner, db: Database, provider: str
) -> None:
    run(cli, "tenant", "create", "acme")
    result = run(
        cli,
        "identity",
        "create",
        "--tenant",
        "acme",
        "--provider",
        provider,
        "--token",
        "tok-123456789",
        "--reply-rate",
        "5",
        "--campaign-rate",
        "2",
        "--total-rate",
        "40",
        *PROVIDER_ARGS[provider],
    )
    identity_id = int(last_line(result.output))
    assert "tok-123456789" not in result.output
    with db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None
        assert identity.provider == provider and not identity.base_url.endswith("/")
        assert (identity.reply_rate, identity.campaign_rate, identity.total_rate) == (5, 2, 40)
        assert "tok-123456789" not in identity.token_encrypted
        assert SecretBox(SECRET_KEY).decrypt(identity.token_encrypted) == "tok-123456789"
        if provider == "twilio":
            assert identity.sender == "whatsapp:+15550001111"
        else:
            assert SecretBox(SECRET_KEY).decrypt(identity.app_secret_encrypted or "") == "s3cret"


def test_identity_create_refuses_a_duplicate_account_and_an_unknown_tenant(
    cli: FlaskCliRunner,
) -> None:
    run(cli, "tenant", "create", "acme")
    args = [
        "identity",
        "create",
        "--tenant",
        "acme",
        "--provider",
        "whatsapp",
        "--token",
        "t",
        *PROVIDER_ARGS["whatsapp"],
    ]
    run(cli, *args)
    again = run(cli, *args, ok=False)
    assert again.exit_code != 0 and "already exists" in again.output
    args[3] = "nobody"
    unknown = run(cli, *args, ok=False)
    assert unknown.exit_code != 0 and "no tenant named 'nobody'" in unknown.output


def test_identity_create_requires_the_meta_app_secret(cli: FlaskCliRunner) -> None:
    run(cli, "tenant", "create", "acme")
    result = run(
        cli,
        "identity",
        "create",
        "--tenant",
        "acme",
        "--provider",
        "whatsapp",
        "--token",
        "t",
        "--account-id",
        "1",
        "--base-url",
        "http://x",
        ok=False,
    )
    assert result.exit_code != 0 and "--app-secret" in result.output


def make_identity(cli: FlaskCliRunner) -> int:
    run(cli, "tenant", "create", "acme")
    result = run(
        cli,
        "identity",
        "create",
        "--tenant",
        "acme",
        "--provider",
        "whatsapp",
        "--token",
        "old-token",
        *PROVIDER_ARGS["whatsapp"],
    )
    return int(last_line(result.output))


def test_identity_update_replaces_the_token_and_says_what_changed(
    cli: FlaskCliRunner, db: Database
) -> None:
    identity_id = make_identity(cli)
    result = run(
        cli, "identity", "update", str(identity_id), "--token", "new-token", "--total-rate", "40"
    )
    assert "token" in result.output and "total rate" in result.output
    assert "new-token" not in result.output
    with db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None
        assert SecretBox(SECRET_KEY).decrypt(identity.token_encrypted) == "new-token"
        assert identity.total_rate == 40
    nothing = run(cli, "identity", "update", str(identity_id), ok=False)
    assert nothing.exit_code != 0 and "nothing to change" in nothing.output
    missing = run(cli, "identity", "update", "999999", "--token", "x", ok=False)
    assert missing.exit_code != 0 and "no identity" in missing.output


def test_lane_rates_that_add_up_to_more_than_the_total_are_refused_and_nothing_changes(
    cli: FlaskCliRunner, db: Database
) -> None:
    identity_id = make_identity(cli)
    refused = run(cli, "identity", "update", str(identity_id), "--total-rate", "25", ok=False)
    assert refused.exit_code != 0
    assert "add up to more than the total rate" in refused.output
    assert "nothing was changed" in refused.output
    with db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None and identity.total_rate == 80
    run(cli, "tenant", "create", "other")
    created = run(
        cli,
        "identity",
        "create",
        "--tenant",
        "other",
        "--provider",
        "whatsapp",
        "--account-id",
        "77",
        "--base-url",
        "http://127.0.0.1:9",
        "--token",
        "t",
        "--app-secret",
        "s",
        "--reply-rate",
        "50",
        "--campaign-rate",
        "50",
        ok=False,
    )
    assert created.exit_code != 0 and "nothing was created" in created.output


def test_identity_pause_and_resume_say_what_they_did_and_are_audited(
    cli: FlaskCliRunner, db: Database
) -> None:
    identity_id = make_identity(cli)
    assert (
        "paused identity"
        in run(cli, "identity", "pause", str(identity_id), "--reason", "token rotated").output
    )
    assert (
        "already paused"
        in run(cli, "identity", "pause", str(identity_id), "--reason", "again").output
    )
    with db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None and identity.paused_reason == "token rotated"
    assert "resumed identity" in run(cli, "identity", "resume", str(identity_id)).output
    assert "was not paused" in run(cli, "identity", "resume", str(identity_id)).output
    with db.transaction() as session:
        rows = session.query(AuditEntry).order_by(AuditEntry.id).all()
        identity = session.get(Identity, identity_id)
        assert identity is not None
    assert [a.action for a in rows] == ["identity.pause", "identity.resume"]
    # The tenant's own staff can read them on the dashboard's audit trail.
    assert {a.tenant_id for a in rows} == {identity.tenant_id}


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


def test_identity_pause_campaign_only_holds_the_campaign_lane_and_is_audited(
    cli: FlaskCliRunner, db: Database
) -> None:
    identity_id = make_identity(cli)
    paused = run(
        cli, "identity", "pause", str(identity_id), "--campaign-only", "--reason", "wrong list"
    )
    assert f"paused the campaign lane of identity {identity_id}: wrong list" in paused.output
    with db.transaction() as session:
        identity = session.get(Identity, identity_id, populate_existing=True)
        assert identity is not None
        assert identity.paused_at is None and identity.campaign_paused_reason == "wrong list"
    refused = run(cli, "identity", "pause", str(identity_id), "--reason", " ", ok=False)
    assert "say why it is paused" in refused.output and "nothing was changed" in refused.output
    resumed = run(cli, "identity", "resume", str(identity_id), "--campaign-only")
    assert f"resumed the campaign lane of identity {identity_id}: 0 waiting" in resumed.output
    with db.transaction() as session:
        identity = session.get(Identity, identity_id, populate_existing=True)
        assert identity is not None and identity.campaign_paused_at is None
        actions = [a.action for a in session.query(AuditEntry).order_by(AuditEntry.id)]
    assert actions == ["identity.pause_campaign", "identity.resume_campaign"]


@pytest.mark.parametrize(
    ("base_url", "says"),
    [
        ("https://user:hunter2@graph.example/v21.0", "user name or password"),
        ("user:hunter2@graph.example/v21.0", "user name or password"),
        ("https:/user:hunter2@graph.example", "user name or password"),
        ("ftp://graph.example/v21.0", "must start with https://"),
        ("graph.facebook.com/v21.0", "must start with https://"),
        ("https:graph.example/hunter2", "must start with https://"),
        ("https:///v21.0", "names no host"),
        ("https://./v21.0", "names no host"),
        ("https://graph.example:0/v21.0", "port 0"),
        ("https://graph.example/v21.0?access_token=hunter2", "query or fragment"),
        ("https://graph.example/v21.0#hunter2", "query or fragment"),
        ("https://graph.example:hunter2/v21.0", "port cannot be read"),
        (" https://graph.example/v21.0", "spaces"),
        ("https://graph.example/v1\x7f", "control"),
        ("https://gr\u00e4ph.example/hunter2", "non-ASCII"),
        ("https://graph.example/" + "v" * 500, "at most 500"),
    ],
    ids=[
        "credentials",
        "credentials without a scheme",
        "credentials after one slash",
        "ftp",
        "no scheme",
        "no slashes",
        "no host",
        "a dot for a host",
        "port 0",
        "query",
        "fragment",
        "port",
        "space",
        "DEL",
        "non-ASCII",
        "long",
    ],
)
def test_a_base_url_no_call_can_use_is_refused_and_nothing_is_stored(
    cli: FlaskCliRunner, db: Database, base_url: str, says: str
) -> None:
    identity_id = make_identity(cli)
    args = ["identity", "create", "--tenant", "acme", "--provider", "whatsapp", "--token", "t"]
    args += ["--account-id", "4242", "--base-url", base_url, "--app-secret", "s"]
    created = run(cli, *args, ok=False)
    assert created.exit_code != 0 and says in created.output
    assert "nothing was created" in created.output
    updated = run(cli, "identity", "update", str(identity_id), "--base-url", base_url, ok=False)
    assert updated.exit_code != 0 and says in updated.output
    assert "nothing was changed" in updated.output
    assert "hunter2" not in created.output + updated.output
    with db.transaction() as session:
        assert session.scalars(select(Identity.base_url)).all() == [
            PROVIDER_ARGS["whatsapp"][PROVIDER_ARGS["whatsapp"].index("--base-url") + 1].rstrip("/")
        ]


def test_a_base_url_s_trailing_slashes_are_dropped(cli: FlaskCliRunner, db: Database) -> None:
    identity_id = make_identity(cli)
    run(cli, "identity", "update", str(identity_id), "--base-url", "http://127.0.0.1:9/v21.0//")
    with db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None and identity.base_url == "http://127.0.0.1:9/v21.0"


@pytest.mark.parametrize(
    "token",
    ["EAAG-tok\u200ben", "EAAG tok", "EAAG-tok\n", "EAAG-tok\x7f", "EAAG-t\u00f6k"],
    ids=["zero-width space", "space", "line break", "DEL", "non-ASCII"],
)
def test_a_token_no_http_header_can_carry_is_refused_and_nothing_is_stored(
    cli: FlaskCliRunner, db: Database, token: str
) -> None:
    identity_id = make_identity(cli)
    with db.transaction() as session:
        before = session.get(Identity, identity_id)
        assert before is not None
        version, sealed = before.credentials_version, before.token_encrypted
    args = ["identity", "create", "--tenant", "acme", "--provider", "whatsapp"]
    args += ["--account-id", "4243", "--base-url", "https://graph.example/v21.0"]
    created = run(cli, *args, "--app-secret", "s", "--token", token, ok=False)
    assert created.exit_code != 0 and "no HTTP header can carry" in created.output
    assert "nothing was created" in created.output
    updated = run(cli, "identity", "update", str(identity_id), "--token", token, ok=False)
    assert updated.exit_code != 0 and "no HTTP header can carry" in updated.output
    assert "nothing was changed" in updated.output
    assert "EAAG" not in created.output + updated.output
    with db.transaction() as session:
        assert session.scalars(select(func.count()).select_from(Identity)).one() == 1
        after = session.get(Identity, identity_id)
        assert after is not None
        assert (after.credentials_version, after.token_encrypted) == (version, sealed)


def test_identity_create_and_update_store_the_business_account_meta_names(
    cli: FlaskCliRunner, db: Database
) -> None:
    identity_id = make_identity(cli)
    result = run(cli, "identity", "update", str(identity_id), "--business-account", "102290129")
    assert "business account id" in result.output
    refused = run(cli, "identity", "update", str(identity_id), "--business-account", "x1", ok=False)
    assert "not a WhatsApp business account id" in refused.output
    with db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None and identity.business_account_id == "102290129"
