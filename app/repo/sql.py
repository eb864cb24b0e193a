"""Small SQL helpers that differ by dialect."""

from __future__ import annotations

from typing import Any

from sqlalchemy import CursorResult, Executable, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


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
    builder = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = (
        builder(table)
        .values(**values)
        .on_conflict_do_nothing(index_elements=conflict_columns, index_where=conflict_where)
        .returning(table.c.id)
    )
    return session.execute(statement).scalar_one_or_none()


def rows_changed(session: Session, statement: Executable) -> int:
    """Run an UPDATE or DELETE and return how many rows it changed (the compare-and-set)."""
    result = session.execute(statement)
    assert isinstance(result, CursorResult)
    return result.rowcount
