"""The SQL a block of code sends, for the tests that hold a path to a number of round trips:
the statements' verbs (`statements`), or every execution, an executemany once per row
(`executions`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from app.db import Database


@contextmanager
def statements(database: Database) -> Iterator[list[str]]:
    """The verbs of the SQL statements sent meanwhile (savepoints left out)."""
    verbs: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb not in ("SAVEPOINT", "RELEASE", "ROLLBACK"):
            verbs.append(verb)

    event.listen(database.engine, "before_cursor_execute", on_execute)
    try:
        yield verbs
    finally:
        event.remove(database.engine, "before_cursor_execute", on_execute)


@contextmanager
def executions(database: Database) -> Iterator[list[str]]:
    """Every statement the database runs inside: an executemany counts once per row."""
    ran: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        rows = len(parameters) if isinstance(parameters, list) else 1
        ran.extend([" ".join(statement.split())[:60]] * rows)

    event.listen(database.engine, "before_cursor_execute", before)
    try:
        yield ran
    finally:
        event.remove(database.engine, "before_cursor_execute", before)
