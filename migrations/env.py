"""Alembic environment: the URL comes from `app.migrate`, never from an ini file."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from app.db import build_engine
from app.models import Base
from app.models_bulk import BulkPlan  # noqa: F401  (its tables in the metadata)

config = context.config
target_metadata = Base.metadata


def run(connection: Connection) -> None:
    if connection.in_transaction():
        # Alembic must own the transactions (one per migration; 0013 runs outside one).
        raise RuntimeError("migrations need a connection outside any transaction")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        # Each migration commits by itself, so one with an autocommit block (an index
        # built CONCURRENTLY) leaves the ones before it committed and the rest to come.
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    engine = build_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as connection:
            run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `flask --app wsgi db upgrade`")
run_migrations_online()
