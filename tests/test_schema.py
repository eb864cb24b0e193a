"""The migrations: they run on PostgreSQL and SQLite and create exactly the models."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from app import migrate
from app.crypto import SecretBox
from app.db import Database, build_engine
from app.models import Base, Identity

from .conftest import SECRET_KEY
from .factories import make_world


def test_the_migrations_create_exactly_the_models_on_postgresql(pg_url: str) -> None:
    engine = build_engine(pg_url)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert diff == []


def test_the_migrations_run_on_a_fresh_sqlite_file_in_wal_mode(tmp_path: Path) -> None:
    engine = build_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert migrate.current_revision(engine) is None
    assert migrate.upgrade(engine) == migrate.head_revision()
    with engine.connect() as connection, warnings.catch_warnings():
        # SQLAlchemy cannot reflect SQLite's expression indexes, so the comparison leaves
        # out the one index with an expression; its SQL is checked below instead.
        for message in (
            "Skipped unsupported reflection of expression-based index ix_messages_waiting",
            "autogenerate skipping metadata-specified expression-based index 'ix_messages_waiting'",
        ):
            warnings.filterwarnings("ignore", message=re.escape(message))
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        mode = connection.execute(text("PRAGMA journal_mode")).scalar_one()
        waiting = connection.execute(
            text("SELECT sql FROM sqlite_master WHERE name = 'ix_messages_waiting'")
        ).scalar_one()
    tables = set(inspect(engine).get_table_names())
    engine.dispose()
    assert diff == []
    assert mode == "wal"
    assert "(identity_id, lane, (id + 0), shard_key)" in waiting
    assert "WHERE status IN ('queued', 'sending')" in waiting
    assert {"messages", "message_events", "attempts", "identities", "tenants"} <= tables


def test_the_idempotency_index_is_partial_and_unique(pg_url: str) -> None:
    engine = build_engine(pg_url)
    indexes = {i["name"]: i for i in inspect(engine).get_indexes("messages")}
    engine.dispose()
    index = indexes["uq_messages_tenant_idempotency_key"]
    assert index["unique"] and index["column_names"] == ["tenant_id", "idempotency_key"]
    assert "idempotency_key IS NOT NULL" in str(index["dialect_options"]["postgresql_where"])


def test_the_pending_statuses_index_holds_only_unapplied_statuses(
    pg_url: str, tmp_path: Path
) -> None:
    """Alembic's comparison ignores an index's WHERE, so the partial index is checked here,
    on both databases (migration 0013)."""
    engine = build_engine(pg_url)
    with engine.connect() as connection:
        pg = connection.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_webhook_statuses_pending'")
        ).scalar_one()
        leftovers = connection.execute(
            text("SELECT count(*) FROM pg_indexes WHERE indexname LIKE '%pending_new'")
        ).scalar_one()
    engine.dispose()
    assert "(received_at) WHERE (applied_at IS NULL)" in pg
    assert leftovers == 0
    engine = build_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    migrate.upgrade(engine)
    with engine.connect() as connection:
        lite = connection.execute(
            text("SELECT sql FROM sqlite_master WHERE name = 'ix_webhook_statuses_pending'")
        ).scalar_one()
    engine.dispose()
    assert "(received_at) WHERE applied_at IS NULL" in lite


def downgrade(engine: Engine, revision: str) -> None:
    config = migrate.alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.connect() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def test_migration_0013_run_again_after_stopping_before_its_rename_keeps_the_built_index(
    pg_url: str,
) -> None:
    """Stopped between dropping the old index and renaming the new one, a second run renames
    the index already built (the same relation), instead of building it again."""
    engine = build_engine(pg_url)
    oid = "SELECT to_regclass(:name)::oid"
    try:
        downgrade(engine, "0012")
        # What the first run had done when it stopped: the new index built, the old dropped.
        with engine.connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT")
            connection.execute(
                text(
                    "CREATE INDEX CONCURRENTLY ix_webhook_statuses_pending_new "
                    "ON webhook_statuses (received_at) WHERE applied_at IS NULL"
                )
            )
            connection.execute(text("DROP INDEX CONCURRENTLY ix_webhook_statuses_pending"))
            built = connection.execute(
                text(oid), {"name": "ix_webhook_statuses_pending_new"}
            ).scalar_one()
    finally:
        migrate.upgrade(engine)
    with engine.connect() as connection:
        renamed = connection.execute(
            text(oid), {"name": "ix_webhook_statuses_pending"}
        ).scalar_one()
        leftover = connection.execute(
            text(oid), {"name": "ix_webhook_statuses_pending_new"}
        ).scalar_one()
    engine.dispose()
    assert renamed == built
    assert leftover is None


def test_migration_0013_run_again_after_an_interrupted_build_builds_the_index_again(
    pg_url: str,
) -> None:
    """A CONCURRENTLY build that was interrupted leaves an invalid index: the next run drops
    it and builds a valid one."""
    engine = build_engine(pg_url)
    try:
        downgrade(engine, "0012")
        with engine.begin() as connection:
            connection.execute(
                text(
                    "CREATE INDEX ix_webhook_statuses_pending_new "
                    "ON webhook_statuses (received_at) WHERE applied_at IS NULL"
                )
            )
            # What an interrupted CONCURRENTLY build leaves behind.
            connection.execute(
                text(
                    "UPDATE pg_index SET indisvalid = false "
                    "WHERE indexrelid = 'ix_webhook_statuses_pending_new'::regclass"
                )
            )
    finally:
        migrate.upgrade(engine)
    with engine.connect() as connection:
        valid = connection.execute(
            text(
                "SELECT indisvalid FROM pg_index "
                "WHERE indexrelid = to_regclass('ix_webhook_statuses_pending')"
            )
        ).scalar_one()
    engine.dispose()
    assert valid is True


def test_a_provider_token_cannot_be_read_from_the_raw_row_without_the_secret_key(
    db: Database,
) -> None:
    make_world(db, token="EAAG-very-secret-token", app_secret="meta-app-secret")
    with db.transaction() as session:
        raw = session.execute(
            text("SELECT token_encrypted, app_secret_encrypted FROM identities")
        ).one()
        stored = session.query(Identity).one()
    assert "EAAG-very-secret-token" not in raw.token_encrypted
    assert "meta-app-secret" not in raw.app_secret_encrypted
    assert SecretBox(SECRET_KEY).decrypt(stored.token_encrypted) == "EAAG-very-secret-token"
    wrong = SecretBox("another-secret-key-entirely")
    try:
        wrong.decrypt(raw.token_encrypted)
    except ValueError:
        pass
    else:  # pragma: no cover - the assertion that matters
        raise AssertionError("a different SECRET_KEY read the token")


def identity_columns(engine: Engine) -> set[str]:
    return {column["name"] for column in inspect(engine).get_columns("identities")}


def test_migration_0023_adds_and_removes_the_default_validity_on_postgresql(
    pg_url: str,
) -> None:
    engine = build_engine(pg_url)
    validity = {"reply_valid_for", "campaign_valid_for"}
    try:
        downgrade(engine, "0022")
        assert migrate.current_revision(engine) == "0022"
        assert not validity & identity_columns(engine)
    finally:
        migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    assert validity <= identity_columns(engine)
    engine.dispose()


def test_migration_0023_goes_down_and_up_again_on_sqlite_keeping_the_identities(
    tmp_path: Path,
) -> None:
    engine = build_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    migrate.upgrade(engine)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO tenants (name, api_key_prefix, api_key_hash, created_at) "
                "VALUES ('acme', 'p', 'h', '2026-12-04 12:00:00')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO identities (tenant_id, provider, account_id, base_url, "
                "token_encrypted, reply_rate, campaign_rate, total_rate, created_at, "
                "reply_valid_for) VALUES (1, 'whatsapp', '1', 'http://x', 't', 1, 1, 1, "
                "'2026-12-04 12:00:00', 600)"
            )
        )
    downgrade(engine, "0022")
    assert "reply_valid_for" not in identity_columns(engine)
    migrate.upgrade(engine)
    with engine.connect() as connection:
        row = connection.execute(
            text("SELECT account_id, reply_valid_for, campaign_valid_for FROM identities")
        ).one()
    engine.dispose()
    # The identity stays; its default is gone with the downgrade (no limit after it).
    assert tuple(row) == ("1", None, None)
