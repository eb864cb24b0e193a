"""The charts' aggregates in SQL: per time bucket (and per identity, for the rollup), the
sends, deliveries, reads, failures and arrivals of a range of buckets, each over a range
of an indexed time column (sent_at, delivered_at, read_at, status and failed_at,
identity and queued_at), so a query reads the range's rows only.

Both the live charts (`app/repo/charts.py`) and the rollup's fold
(`app/repo/chart_rollup.py`) call `aggregate`: one definition of every figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Integer, case, cast, func, or_, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Message
from app.repo.sql import is_postgresql


@dataclass(slots=True)
class Figures:
    """One bucket's figures (of one identity, or summed over several)."""

    sent: int = 0
    sent_delivered: int = 0  # of the bucket's sends, delivered or read since
    longest_wait: float | None = None  # seconds, queued to sent, of the bucket's sends
    delivered: int = 0
    read: int = 0
    failed: int = 0
    failed_unsent: int = 0  # failed without being sent: it left the queue then
    arrivals: int = 0  # queued in the bucket

    def add(self, other: Figures) -> None:
        self.sent += other.sent
        self.sent_delivered += other.sent_delivered
        if other.longest_wait is not None:
            self.longest_wait = max(self.longest_wait or 0.0, other.longest_wait)
        self.delivered += other.delivered
        self.read += other.read
        self.failed += other.failed
        self.failed_unsent += other.failed_unsent
        self.arrivals += other.arrivals

    def is_empty(self) -> bool:
        return self == Figures()


def bucket_start(number: int, width: int) -> datetime:
    return datetime.fromtimestamp(number * width, UTC)


def _epoch(session: Session, column: Any) -> ColumnElement[Any]:
    """Seconds since 1970 of a timestamp column, in either dialect. On PostgreSQL as
    date_part's double precision: EXTRACT returns numeric, slower per row."""
    if is_postgresql(session):
        return func.date_part("epoch", column)
    return cast(func.strftime("%s", column), Integer)


def _bucket(session: Session, column: Any, width: int) -> ColumnElement[Any]:
    """The bucket number of a timestamp: whole `width`-second steps since 1970."""
    seconds = _epoch(session, column)
    if is_postgresql(session):
        return func.floor(seconds.op("/")(width))
    return seconds.op("/")(width)  # SQLite: integer division of integers


# A key of the result: (identity id, or 0 when summed over the identities; bucket number).
Key = tuple[int, int]


def aggregate(
    session: Session,
    identity_ids: list[int],
    width: int,
    low: int,
    high: int | None = None,
    *,
    per_identity: bool = False,
) -> dict[Key, Figures]:
    """The figures of `identity_ids` in buckets `low <= b < high` (no end: every later one),
    per bucket, or per identity and bucket."""
    found: dict[Key, Figures] = {}
    mine = Message.identity_id.in_(identity_ids)

    def within(column: Any) -> list[ColumnElement[bool]]:
        bounds = [column >= bucket_start(low, width)]
        if high is not None:
            bounds.append(column < bucket_start(high, width))
        return bounds

    def grouped(column: Any, *figures: Any) -> Any:
        bucket = _bucket(session, column, width)
        keys = [Message.identity_id, bucket] if per_identity else [bucket]
        return select(*keys, *figures).where(mine, *within(column)).group_by(*keys)

    def each(query: Any) -> Any:
        for row in session.execute(query):
            if per_identity:
                key, values = (int(row[0]), int(row[1])), row[2:]
            else:
                key, values = (0, int(row[0])), row[1:]
            yield found.setdefault(key, Figures()), values

    delivered_since = or_(Message.delivered_at.is_not(None), Message.read_at.is_not(None))
    sends = grouped(
        Message.sent_at,
        func.count(),
        func.sum(case((delivered_since, 1), else_=0)),
        func.max(_epoch(session, Message.sent_at) - _epoch(session, Message.queued_at)),
    )
    for figures, (count, delivered, wait) in each(sends):
        figures.sent = int(count)
        figures.sent_delivered = int(delivered or 0)
        figures.longest_wait = None if wait is None else max(0.0, float(wait))
    for figures, (count,) in each(grouped(Message.delivered_at, func.count())):
        figures.delivered = int(count)
    for figures, (count,) in each(grouped(Message.read_at, func.count())):
        figures.read = int(count)
    failures = grouped(
        Message.failed_at, func.count(), func.sum(case((Message.sent_at.is_(None), 1), else_=0))
    ).where(Message.status == Status.FAILED.value)
    for figures, (count, unsent) in each(failures):
        figures.failed = int(count)
        figures.failed_unsent = int(unsent or 0)
    for figures, (count,) in each(grouped(Message.queued_at, func.count())):
        figures.arrivals = int(count)
    return found
