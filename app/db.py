"""The database: one engine and session factory per app, built in `init_app`."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
from flask import Flask, current_app, g
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from app.correlation import derive_key
from app.db_checkout import PING_EVERY_CHECKOUT, check_on_checkout
from app.db_clock import keep_database_clock

SQLITE_BUSY_TIMEOUT_MS = 10_000

# A pooled PostgreSQL connection last handed out longer ago than this is pinged (a round
# trip) before use; one used more recently only has its socket looked at, unless the unit
# of work asks for the ping (see `app/db_checkout.py`).
PING_AFTER_IDLE_SECONDS = 2.0

# libpq's TCP settings for every PostgreSQL connection (a URL's own query overrides them):
# a path that drops packets without a reset (a partition, a NAT dropping the flow) fails a
# connect, a ping or a statement in seconds instead of the kernel's quarter of an hour of
# retransmissions, so a record after a provider's answer is not stuck past its lease.
TCP_SETTINGS = {
    "connect_timeout": 10,  # seconds
    "tcp_user_timeout": 10_000,  # ms a sent byte may go unacknowledged
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}

# A PostgreSQL session idle inside a transaction for longer than this is ended by the
# server, its transaction rolled back and its locks released. No unit of work here waits
# between its statements (provider calls happen outside transactions), so only a process
# stopped mid-transaction reaches it: a worker frozen (SIGSTOP, a frozen VM) inside its
# claim would otherwise hold its claimed rows, invisible to every other drain, and the share
# lock on its identity, which an operator's pause waits for, until it woke, for hours.
IDLE_IN_TRANSACTION_SECONDS = 10.0
# The server's own timer is disarmed by psycopg's pipelines (its `executemany`): after the
# pipeline's Sync it may send a Flush, and a backend that reads a Flush does not arm the
# timer again until the next Sync. So the sweeper also ends this installation's sessions
# idle in a transaction past the limit (`end_stalled_sessions`), which it finds by this
# application name (a URL's own `application_name` replaces it).
APPLICATION_NAME = "ratchet"


def normalise_url(url: str) -> str:
    """`postgresql://` means psycopg 3 here (SQLAlchemy would otherwise pick psycopg2)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def build_engine(
    url: str,
    *,
    ping_after_idle: float = PING_AFTER_IDLE_SECONDS,
    idle_in_transaction: float = IDLE_IN_TRANSACTION_SECONDS,
    **kwargs: Any,
) -> Engine:
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
        engine = create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, hide_parameters=True
        )
        _configure_sqlite(engine)
        return engine
    # A database error's text names the statement, never its values (message bodies,
    # webhook payloads): those errors are logged.
    kwargs.setdefault("hide_parameters", True)
    # The socket check reads psycopg's own connection; any other driver keeps the pre-ping.
    checked = parsed.get_driver_name() == "psycopg" and not kwargs.get("pool_pre_ping")
    kwargs.setdefault("pool_pre_ping", not checked)
    if parsed.get_driver_name() == "psycopg":
        tcp = {name: value for name, value in TCP_SETTINGS.items() if name not in parsed.query}
        # Ours first, then the environment's PGOPTIONS (an explicit `options` would
        # replace it) and the URL's own, so that a setting either gives wins. 0: none
        # (a pooler that refuses startup options, such as PgBouncer before 1.20).
        given = parsed.query.get("options")
        options = " ".join(
            part
            for part in (
                f"-c idle_in_transaction_session_timeout={int(idle_in_transaction * 1000)}"
                if idle_in_transaction > 0
                else "",
                os.environ.get("PGOPTIONS", ""),
                given if isinstance(given, str) else " ".join(given or ()),
            )
            if part
        )
        named = {} if "application_name" in parsed.query else {"application_name": APPLICATION_NAME}
        kwargs["connect_args"] = {
            **tcp,
            **named,
            **({"options": options} if options else {}),
            **kwargs.get("connect_args", {}),
        }
    engine = create_engine(url, **kwargs)
    if checked:
        check_on_checkout(engine, ping_after_idle)
    if engine.dialect.name == "postgresql":
        # After the check above: the clock is read on a connection known to be alive.
        keep_database_clock(engine)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    # WAL lets readers run beside one writer; BEGIN IMMEDIATE takes the write lock up front
    # so two writers queue on the busy timeout instead of deadlocking on a lock upgrade.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def end_stalled_sessions(session: Session, idle_seconds: float) -> list[int]:
    """End this installation's PostgreSQL sessions (same database, role and application
    name as this one's) that have been idle inside a transaction for longer than
    `idle_seconds`: a process stopped mid-transaction, whose server-side timer a pipeline
    disarmed (see `APPLICATION_NAME`). Their transactions roll back and their locks go;
    the process, if it ever wakes, finds its connection closed. Returns their pids.
    Nothing on SQLite, with the limit off (0), or when the application name is empty
    (nothing to tell ours by)."""
    if idle_seconds <= 0 or session.get_bind().dialect.name != "postgresql":
        return []
    rows = session.execute(
        text(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND usename = current_user"
            " AND application_name = current_setting('application_name')"
            " AND application_name <> '' AND pid <> pg_backend_pid()"
            " AND state IN ('idle in transaction', 'idle in transaction (aborted)')"
            " AND state_change < clock_timestamp() - make_interval(secs => :idle)"
        ),
        {"idle": idle_seconds},
    ).all()
    return [int(pid) for pid, ended in rows if ended]


class Database:
    """The engine and its units of work.

    Every session carries the installation's correlation key in `session.info`, so the repo
    functions that issue or read correlation ids need no Flask and no extra argument.
    """

    def __init__(self, url: str, *, correlation_key: bytes = b"", **engine_kwargs: Any) -> None:
        self.engine = build_engine(url, **engine_kwargs)
        self.info = {"correlation_key": correlation_key}
        self.sessions = sessionmaker(self.engine, expire_on_commit=False, info=self.info)
        self.bound = False
        self.pinned_session: Session | None = None
        self.pinned_connection: Connection | None = None

    @contextmanager
    def transaction(self, *, ping: bool = False) -> Iterator[Session]:
        """One unit of work: commits on success, rolls back on error.

        `ping`: the connection it checks out is pinged first however recently it was used
        (see `app/db_checkout.py`), for a unit of work whose failure would lose a fact from
        outside: the record of a provider's answer. Not on a pinned connection (checked out
        already: nothing would be pinged); a test's bound database has one connection."""
        if ping and self.pinned_connection is not None:
            raise ValueError("ping=True needs a checkout; this database's connection is pinned")
        token = PING_EVERY_CHECKOUT.set(True) if ping else None
        try:
            with self._transaction() as session:
                yield session
        finally:
            if token is not None:
                PING_EVERY_CHECKOUT.reset(token)

    @contextmanager
    def _transaction(self) -> Iterator[Session]:
        if self.pinned_connection is not None:
            if self.pinned_session is None:
                # One session for the block, made when first needed (a webhook's usual
                # delivery needs none) and closed after each unit of work: building a
                # session (its event dispatch) cost more CPU than a statement there.
                self.pinned_session = Session(
                    bind=self.pinned_connection, expire_on_commit=False, info=self.info
                )
            session = self.pinned_session
            try:
                with session.begin():
                    yield session
            finally:
                session.close()  # as a new session would be: nothing carried over
            return
        with self.sessions() as session, session.begin():
            yield session

    @property
    def postgresql(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @contextmanager
    def autocommit(self) -> Iterator[Connection | Session]:
        """One statement that is a whole unit of work by itself, committed as it runs.

        PostgreSQL commits a statement sent outside a transaction on its own, atomically:
        no BEGIN and no COMMIT, two round trips fewer than `transaction()`. Only for a
        single statement (several would each commit alone, and a failure would not undo
        the ones before it), and one that, where it must not stand, fails itself (see
        `ratchet_abort`, migration 0010). SQLite and a test's bound database (savepoints
        in its outer transaction) get an ordinary `transaction()`.
        """
        if self.bound or not self.postgresql:
            with self.transaction() as session:
                yield session
            return
        with ExitStack() as stack:
            connection = self.pinned_connection or stack.enter_context(self.engine.connect())
            # psycopg's own switch, set and always set back here: SQLAlchemy's
            # `isolation_level="AUTOCOMMIT"` option does the same for several times the CPU
            # (a sixth of a webhook's, both ways), and its transactions stay as they were.
            driver = connection.connection.driver_connection
            assert driver is not None and not driver.autocommit
            driver.autocommit = True
            try:
                yield connection
                connection.commit()  # ends SQLAlchemy's own record of it; nothing is sent
            except BaseException:
                connection.rollback()
                raise
            finally:
                if not driver.closed:
                    try:
                        driver.autocommit = False
                    except psycopg.Error:
                        # Still mid-statement (an exception raised while psycopg waited
                        # on the server): never to be used again, in either mode.
                        connection.invalidate()

    @contextmanager
    def one_connection(self) -> Iterator[Database]:
        """This database with every unit of work of the block on one pooled connection.

        A webhook commits twice (the raw delivery, then each status): on one connection
        that is one pool checkout (and its check) instead of one per transaction. Each
        `transaction()` of the block still commits or rolls back on its own.
        """
        if self.bound:  # already on one connection (a test's)
            yield self
            return
        with self.engine.connect() as connection:
            pinned = copy.copy(self)
            pinned.pinned_connection = connection
            try:
                yield pinned
            finally:
                if pinned.pinned_session is not None:
                    pinned.pinned_session.close()

    def bind_to(self, connection: Any) -> None:
        """Run every session inside `connection`'s transaction, as savepoints.

        SQLAlchemy's recipe for tests that roll back: the code under test still commits
        its own units of work, which become savepoints of the outer transaction.
        """
        self.sessions = sessionmaker(
            bind=connection,
            join_transaction_mode="create_savepoint",
            expire_on_commit=False,
            info=self.info,
        )
        self.bound = True

    def dispose(self) -> None:
        self.engine.dispose()


def init_app(app: Flask, database: Database | None = None) -> None:
    config = app.config["RATCHET"]
    # A drain records its calls' outcomes on its own thread (`jobs/in_flight.py`), so a
    # worker needs a connection or two whatever its calls in flight; the pool is sized for
    # a web process's request threads, and opens connections only as they are needed.
    pool = (
        {}
        if config.database_url.startswith("sqlite")
        else {
            "pool_size": 10,
            "max_overflow": 10,
            "idle_in_transaction": config.db_idle_in_transaction,
        }
    )
    app.extensions["ratchet.db"] = database or Database(
        config.database_url, correlation_key=derive_key(config.secret_key), **pool
    )
    app.teardown_request(_release_request_db)


def get_db() -> Database:
    db: Database = current_app.extensions["ratchet.db"]
    return db


def request_db() -> Database:
    """`get_db()` with every unit of work of this request on one pooled connection, checked
    out on the first call and returned to the pool when the request ends (a webhook's two
    transactions then cost one checkout, not two)."""
    pinned: Database | None = g.get("ratchet_request_db")
    if pinned is None:
        stack = ExitStack()
        pinned = stack.enter_context(get_db().one_connection())
        g.ratchet_request_db = pinned
        g.ratchet_request_db_stack = stack
    return pinned


def _release_request_db(_error: BaseException | None) -> None:
    # Cleared per request: a test's app context outlives its requests.
    stack: ExitStack | None = g.pop("ratchet_request_db_stack", None)
    g.pop("ratchet_request_db", None)
    if stack is not None:
        stack.close()
