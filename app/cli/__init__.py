"""The operations CLI: `flask --app wsgi ...`. A stable interface; each command says what it did.

Commands that create something print its key or id on their last line, for scripts.
"""

from __future__ import annotations

from flask import Flask

from app.cli.alerts import alerts_cli
from app.cli.identity_validity import identity_validity_command
from app.cli.operations import message_cli
from app.cli.processes import demo_command, sandbox_command, sweep_command, worker_command
from app.cli.setup import db_cli, identity_cli, staff_cli, tenant_cli
from app.cli.tenant_settings import tenant_settings_command


def init_app(app: Flask) -> None:
    for group in (db_cli, tenant_cli, identity_cli, staff_cli, message_cli):
        app.cli.add_command(group)
    for command in (worker_command, sweep_command, sandbox_command, demo_command):
        app.cli.add_command(command)
    app.cli.add_command(alerts_cli)
    tenant_cli.add_command(tenant_settings_command)
    identity_cli.add_command(identity_validity_command)
