"""The verbs of the SQL statements a block of code sends (`statements`), for the tests that
hold a path to a number of round trips.
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
