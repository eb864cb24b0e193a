"""The identity commands of the operations CLI, through Flask's CLI runner: create, update,
rates, pause and resume; each does and says what it did, and bad input stores nothing."""

from __future__ import annotations

import pytest
from flask.testing import FlaskCliRunner
from sqlalchemy import func, select

from app.crypto import SecretBox
from app.db import Database
from app.models import AuditEntry, Identity
from app.providers import PROVIDERS

from .cli_runs import (
    BUILT_PROVIDERS,
    PROVIDER_ARGS,
    UNBUILT_PROVIDERS,
    cli,
    last_line,
    make_identity,
    run,
)
from .conftest import SECRET_KEY

__all__ = ["cli"]  # the fixture, imported for these tests


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
