"""The operations CLI as the tests drive it (Flask's CLI runner): the runner fixture, a
command run that must succeed, each provider's identity options, and an identity made
through the CLI."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner

from app.db import Database
from app.providers import PROVIDERS

__all__ = ["cli"]


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
