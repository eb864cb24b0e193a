"""Small SQL helpers that differ by dialect."""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from sqlalchemy import (
    ClauseElement,
    ColumnElement,
    Connection,
    CursorResult,
    Executable,
    Table,
    literal_column,
    true,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import MultipleResultsFound, NoResultFound, StatementError
from sqlalchemy.orm import QueryableAttribute, Session
from sqlalchemy.sql.compiler import SQLCompiler


def is_postgresql(session: Session) -> bool:
    """The session's database is PostgreSQL (the fast paths' single statements need it)."""
    return session.get_bind().dialect.name == "postgresql"


def insert_ignoring_conflict(
    session: Session,
    table: Table | Any,
    values: dict[str, Any],
    conflict_columns: list[str],
    conflict_where: Any = None,
) -> int | None:
    """INSERT ... ON CONFLICT DO NOTHING; the new row's id, or None if it already existed.

    The unique index decides, never a read first: two concurrent inserts cannot both win.
    """
    dialect = session.get_bind().dialect.name
    key = (dialect, table.name, tuple(conflict_columns))
    statement = _INSERTS.get(key) if conflict_where is None else None
    if statement is None:
        builder = postgresql.insert if dialect == "postgresql" else sqlite.insert
        statement = builder(table).on_conflict_do_nothing(
            index_elements=conflict_columns, index_where=conflict_where
        )
        statement = statement.returning(table.c.id)
        if conflict_where is None:
            _INSERTS[key] = statement
    # The values go as parameters of one statement built once: building it per row (its
    # `.values(...)`) cost more CPU than the round trip on the webhook's hot path.
    return session.execute(statement, values).scalar_one_or_none()


# (dialect, table, conflict columns) -> the INSERT ... ON CONFLICT DO NOTHING RETURNING id.
_INSERTS: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def rows_changed(
    session: Session, statement: Executable, params: dict[str, Any] | None = None
) -> int:
    """Run an UPDATE or DELETE and return how many rows it changed (the compare-and-set)."""
    result = session.execute(statement, params)
    assert isinstance(result, CursorResult)
    return result.rowcount


def unindexed(column: ColumnElement[int]) -> ColumnElement[int]:
    """An integer column as an expression no index can serve (`column + 0`), for a lookup
    that another, more selective index must drive.

    A status is matched by its identity and provider id. The provider id picks one or two
    rows; the identity can pick millions. When the statistics lag a burst of an identity's
    new messages, PostgreSQL thinks the identity is rare and walks one of the many indexes
    that lead with `identity_id`, filtering on the provider id: every message of the
    identity read for one webhook (seen in `bench/webhook_rate.py`; an index on both
    columns did not stop it). With the identity unindexable, the provider id's index is
    the only way in, whatever the statistics say.
    """
    return column + literal_column("0")


def keyed(test: ColumnElement[bool]) -> ColumnElement[bool]:
    """A test on a row that its key must find (a message or a status row by its id), put
    out of the indexes' reach: `(test) IS true`, the same truth for a test that is never
    NULL, and for one that is (`still_null`).

    The messages' status, timestamps and provider id, and the status rows' `applied_at`,
    are indexed for the sweeper's, the dashboard's and the webhooks' scans, several by
    partial indexes (`WHERE status IN ('queued', 'sending')`, `WHERE status = 'failed'`).
    When the statistics were taken with hardly a row there (every status applied, every
    message delivered: before a campaign's burst, or a backlog), PostgreSQL rates such a
    test, or the partial index it implies, at a row or less, below the primary key, and
    walks that index filtering on the id: every pending status read to finish one, every
    waiting message read to record one send (seen in `bench/webhook_rate.py`;
    `tests/repo/test_key_lookups_plan.py` reads 1,500 to 4,511 rows a statement without
    it). Wrapped, the test can neither drive a scan nor prove a partial index's predicate,
    so the key is the only way in.
    """
    return test.is_(true())


def still_null(column: ColumnElement[Any] | QueryableAttribute[Any]) -> ColumnElement[bool]:
    """`column IS NULL` for a row found by its key (see `keyed`)."""
    return keyed(column.is_(None))


class DriverStatement:
    """A Core statement compiled once for its dialect and sent as that text, for a
    statement run hundreds of times a second.

    `session.execute(statement)` redoes, on every execution, work whose answer never
    changes for a statement built once: the statement's cache key (a walk of the whole
    tree, long for the webhook's CTEs), then the parameters' construction from the
    compiled form. Here that is done once; each execution only fills in the values fixed
    in the statement (a LIMIT's) and runs the bind processors of the types that have one
    (the UTC check of `UTCDateTime`, JSON's serialiser), as SQLAlchemy would.

    With psycopg, the text goes to the driver's own cursor on the Connection's DBAPI
    connection (`_on_driver`): SQLAlchemy's execution context and result object around
    one statement cost about an eighth of a webhook's CPU (measured in-process: 0.84 against
    0.74 ms a delivery), for nothing these statements use. What the Connection would add
    is kept: its error handling (`DBAPIError`, parameters hidden; a lost connection
    invalidated, with the pool's older connections) and its transaction (begun as
    `exec_driver_sql` would begin it). Where the Connection's execution events are
    listened to (the statement counters of the tests and benchmarks), or it can take no
    statement, the text goes through `Connection.exec_driver_sql`, which runs the
    listeners and raises SQLAlchemy's own errors. So it does where SQLAlchemy logs its
    statements (`echo`, or the `sqlalchemy.engine` logger at INFO) or a dialect's
    `do_execute` event is listened to: both then see these statements too.

    Compiled so for a driver taking named parameters (psycopg's `%(name)s`); on another
    (SQLite's `?`) the statement is run the ordinary way. Only for statements with plain
    result columns: no result processors are applied (integers, strings and
    booleans come back as the driver gives them). A statement needing what only an
    execution can supply is refused when first compiled, with ValueError: a column's
    Python-side default or onupdate, a parameter computed at execution, an expanding
    (`IN`) or literal-execute parameter, a name the compiler had to escape. An error in
    a parameter's value (a naive datetime, a missing one) is a `StatementError`, as
    `session.execute` raises it, with the values left out.
    """

    __slots__ = ("_compiled", "statement")

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        # By dialect class: psycopg's and another driver's PostgreSQL differ in their
        # parameter style and their bind processors.
        self._compiled: dict[type, _Compiled] = {}

    def execute(self, session: Session | Connection, params: dict[str, Any]) -> DriverRows:
        """The statement's rows (all of them, fetched), run on `session`'s connection."""
        connection = session if isinstance(session, Connection) else session.connection()
        dialect = connection.dialect
        if dialect.paramstyle != "pyformat":
            # SQLite's `?`: the ordinary Core execution, with its own statement cache.
            return DriverRows.of(connection.execute(cast(Executable, self.statement), params))
        compiled = self._compiled.get(type(dialect))
        if compiled is None:
            compiled = self._compiled[type(dialect)] = _Compiled.of(self.statement, dialect)
        values = {**compiled.fixed, **params}  # the caller's own dict left as it was
        missing = compiled.names - values.keys()
        if missing:
            names = ", ".join(repr(name) for name in sorted(missing))
            raise StatementError(
                f"A value is required for bind parameter {names}", compiled.text, None, None
            )
        for name, process in compiled.processors:
            try:
                values[name] = process(values[name])
            except Exception as exc:
                raise StatementError(
                    f"({type(exc).__name__}) {exc}", compiled.text, None, exc
                ) from exc
        if dialect.driver == "psycopg" and _driver_may_run(connection):
            return _on_driver(connection, compiled.text, values)
        return DriverRows.of(connection.exec_driver_sql(compiled.text, values))


class DriverRows:
    """What a `DriverStatement` returned: its rows, each a tuple whose columns are also
    attributes (`row.id`), as SQLAlchemy's rows are."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    @classmethod
    def of(cls, result: CursorResult[Any]) -> DriverRows:
        """A Core result's rows; none for a statement that returns none."""
        return cls(list(result.all()) if result.returns_rows else [])

    def all(self) -> list[Any]:
        return self.rows

    def first(self) -> Any:
        """The first row, or None."""
        return self.rows[0] if self.rows else None

    def one(self) -> Any:
        """The one row; `NoResultFound` or `MultipleResultsFound` otherwise."""
        if not self.rows:
            raise NoResultFound("No row was found when one was required")
        if len(self.rows) > 1:
            raise MultipleResultsFound("Multiple rows were found when exactly one was required")
        return self.rows[0]


# The Connection's events that see a statement run: any listener, and the statement goes
# through the Connection so that it runs.
_EXECUTION_EVENTS = (
    "before_execute",
    "after_execute",
    "before_cursor_execute",
    "after_cursor_execute",
)


def _driver_may_run(connection: Connection) -> bool:
    """The statement may go to the driver: nobody listens to the Connection's execution
    events or logs its statements, and it is usable (open, valid, its transactions able
    to take a statement; where they are not, `exec_driver_sql` raises the error that says
    why)."""
    if connection.closed or connection.invalidated:
        return False
    dispatch = connection.dispatch
    if any(getattr(dispatch, name) for name in _EXECUTION_EVENTS):
        return False
    # `_echo`: the Connection's own reading of `echo` and the engine logger's level, taken
    # when it was made (SQLAlchemy logs a statement by it).
    if getattr(connection, "_echo", False):
        return False
    dialect_events = connection.dialect.dispatch
    if dialect_events.handle_error or dialect_events.do_execute:
        return False
    for transaction in (connection.get_transaction(), connection.get_nested_transaction()):
        if transaction is not None and not transaction.is_active:
            return False
    return True


def _on_driver(connection: Connection, text: str, values: dict[str, Any]) -> DriverRows:
    """Run `text` on psycopg's cursor, with what the Connection would do around it."""
    driver = connection.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    if not driver.autocommit and not connection.in_transaction():
        connection.begin()  # as `exec_driver_sql` begins one, for the caller's commit
    cursor = driver.cursor()
    try:
        cursor.execute(text, values)
        description = cursor.description
        rows: list[Any] = []
        if description is not None:
            make = _row_type(tuple(column.name for column in description))._make
            rows = [make(row) for row in cursor.fetchall()]
    except psycopg.Error as exc:
        # SQLAlchemy's own handling, as `exec_driver_sql` would have applied it: the
        # error translated (`DBAPIError`, the engine's `hide_parameters`), and a lost
        # connection invalidated with every connection pooled before it (a dead network
        # path would otherwise pass the checkout's socket check, and hang a statement).
        # A private method: `tests/repo/test_driver_statement.py` holds it to all three.
        connection._handle_dbapi_exception(exc, text, values, cast(Any, cursor), None)
        raise  # (it always raises)
    except BaseException:
        # Cut short mid-statement (an exit, a timeout's signal): where the conversation
        # with the server stands is not known, so the connection is not used again.
        connection.invalidate()
        raise
    finally:
        if not cursor.closed:
            cursor.close()
    return DriverRows(rows)


@functools.lru_cache(maxsize=256)
def _row_type(names: tuple[str, ...]) -> Any:
    """A row class with the columns' names as attributes. `rename`: a name no attribute
    can have (a keyword, a repeat, a leading underscore) becomes `_<position>` instead of
    failing, after the statement already ran (and, in autocommit, committed)."""
    return collections.namedtuple("DriverRow", names, rename=True)


@dataclass(frozen=True, slots=True)
class _Compiled:
    text: str
    fixed: dict[str, Any]  # values written in the statement (`.limit(1)`'s, a None)
    processors: tuple[tuple[str, Any], ...]  # (parameter, its type's bind processor)
    names: frozenset[str]  # every parameter the text names

    @classmethod
    def of(cls, statement: ClauseElement, dialect: Any) -> _Compiled:
        if dialect.paramstyle != "pyformat":
            raise ValueError(f"{dialect.name}: named parameters needed, not {dialect.paramstyle}")
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        if compiled.insert_prefetch or compiled.update_prefetch:
            columns = [c.name for c in (*compiled.insert_prefetch, *compiled.update_prefetch)]
            raise ValueError(
                f"columns {columns} take a Python-side default at execution: give them values"
            )
        if compiled.escaped_bind_names:
            raise ValueError(f"parameter names {sorted(compiled.escaped_bind_names)} escaped")
        fixed: dict[str, Any] = {}
        processors: dict[str, Any] = {}  # one per name: a name may be bound several times
        for bind, name in compiled.bind_names.items():
            if bind.callable is not None:
                raise ValueError(f"{name}: a parameter computed at execution is not supported")
            if bind.expanding or bind.literal_execute:
                raise ValueError(f"{name}: an expanding or literal-execute parameter")
            if not bind.required:  # a value of the statement's own, None included
                fixed[name] = bind.value
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                processors[name] = process
        names = frozenset(compiled.bind_names.values())
        return cls(str(compiled), fixed, tuple(processors.items()), names)
