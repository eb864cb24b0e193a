"""The operations CLI: `flask --app wsgi ...`. A stable interface; each command says what it did."""

from __future__ import annotations

import click
from flask import Flask
from flask.cli import AppGroup

from app import migrate
from app.db import get_db

db_cli = AppGroup("db", help="The database schema.")


@db_cli.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema to the latest revision."""
    engine = get_db().engine
    before = migrate.current_revision(engine)
    after = migrate.upgrade(engine)
    where = engine.url.render_as_string(hide_password=True)
    if before == after:
        click.echo(f"schema already at revision {after} ({where})")
    else:
        click.echo(f"schema upgraded from {before or 'empty'} to {after} ({where})")


def init_app(app: Flask) -> None:
    app.cli.add_command(db_cli)
