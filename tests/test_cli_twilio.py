"""`identity create --provider twilio`: the identity is the pair (Account SID, From)."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from app.db import Database
from app.models import Identity

SID = "AC" + "a" * 32


@pytest.fixture
def cli(app: Flask, db: Database) -> FlaskCliRunner:
    runner = app.test_cli_runner()
    assert runner.invoke(args=["tenant", "create", "acme"]).exit_code == 0
    return runner


def create(cli: FlaskCliRunner, sender: str, *extra: str, sid: str = SID):
    return cli.invoke(
        args=[
            "identity",
            "create",
            "--tenant",
            "acme",
            "--provider",
            "twilio",
            "--account-id",
            sid,
            "--base-url",
            "https://api.twilio.com",
            "--token",
            "twilio-auth-token-123",
            "--from",
            sender,
            *extra,
        ]
    )


def senders(db: Database) -> list[tuple[str, str | None]]:
    with db.transaction() as session:
        rows = session.scalars(select(Identity).order_by(Identity.id)).all()
        return [(row.account_id, row.sender) for row in rows]


def test_one_account_with_two_senders_is_two_identities_and_the_same_pair_is_refused(
    cli: FlaskCliRunner, db: Database
) -> None:
    first = create(cli, "whatsapp:+14155238886")
    assert first.exit_code == 0, first.output
    identity_id = int(first.output.strip().splitlines()[-1])
    assert f"/webhooks/twilio/{identity_id}" in first.output
    assert "twilio-auth-token-123" not in first.output
    assert create(cli, "whatsapp:+14155230000").exit_code == 0
    again = create(cli, "whatsapp:+14155238886")
    assert again.exit_code != 0
    assert "already exists" in again.output and "whatsapp:+14155238886" in again.output
    assert senders(db) == [(SID, "whatsapp:+14155238886"), (SID, "whatsapp:+14155230000")]


def test_another_account_may_use_the_same_sender_string(cli: FlaskCliRunner, db: Database) -> None:
    assert create(cli, "whatsapp:+14155238886").exit_code == 0
    assert create(cli, "whatsapp:+14155238886", sid="AC" + "b" * 32).exit_code == 0
    assert len(senders(db)) == 2


@pytest.mark.parametrize("sender", ["+14155238886", "whatsapp:14155238886", "whatsapp:+1", "sms"])
def test_a_sender_that_is_not_whatsapp_e164_is_refused_and_nothing_created(
    cli: FlaskCliRunner, db: Database, sender: str
) -> None:
    result = create(cli, sender)
    assert result.exit_code != 0 and "is not a Twilio WhatsApp sender" in result.output
    assert senders(db) == []


def test_whatsapp_identities_stay_unique_by_account_id(cli: FlaskCliRunner, db: Database) -> None:
    args = [
        "identity",
        "create",
        "--tenant",
        "acme",
        "--provider",
        "whatsapp",
        "--account-id",
        "106540352242922",
        "--base-url",
        "https://graph.facebook.com/v21.0",
        "--token",
        "tok-123456789",
        "--app-secret",
        "s3cret",
    ]
    assert cli.invoke(args=args).exit_code == 0
    again = cli.invoke(args=args)
    assert again.exit_code != 0 and "already exists" in again.output
