"""Schema migrations (Alembic), run by `flask --app wsgi db upgrade` and by the tests."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url)
    return config


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Upgrade the schema to `revision`; returns the revision the database is now at."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    # Not inside a transaction of ours: Alembic commits each migration by itself, and a
    # migration that builds an index CONCURRENTLY (0013) commits what came before it.
    with engine.connect() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return current_revision(engine) or "none"


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()
