"""What the charts draw: per time bucket, for a set of identities (one, or a tenant's), the
sends, deliveries, reads and failures, the delivered rate of each bucket's sends, the queue's
depth and the longest wait of each bucket's sends; and the dead letters by class now.

Every figure is an aggregate in SQL over a range of an indexed time column (sent_at by
identity, delivered_at, read_at, status and failed_at), grouped by bucket, so a chart reads
the window's rows only, however long the history is. Nothing is sampled or stored.

The queue's depth is rebuilt from the same timestamps: the messages waiting now (queued or
sending), walked back bucket by bucket, less each bucket's arrivals (queued_at) and plus its
departures (the first of sent_at and failed_at). A message requeued keeps only its latest
cycle's times, so an earlier cycle's stay is not drawn.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Integer, and_, case, cast, func, or_, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Message
from app.repo.sql import is_postgresql

# The windows a person may choose, and the bucket each is drawn in.
RANGES = {
    "hour": (timedelta(hours=1), timedelta(minutes=1)),
    "day": (timedelta(days=1), timedelta(minutes=15)),
    "week": (timedelta(days=7), timedelta(hours=1)),
}


@dataclass(slots=True)
class Series:
    """Per bucket, oldest first; `starts[i]` begins bucket i."""

    start: datetime
    end: datetime
    bucket: timedelta
    starts: list[datetime]
    sent: list[int]
    delivered: list[int]
    read: list[int]
    failed: list[int]
    # Of the sends in the bucket, how many were delivered or read since (None: no sends).
    delivered_rate: list[float | None]
    waiting: list[int]  # at the end of each bucket
    longest_wait: list[float | None]  # seconds, queued to sent, of the bucket's sends
    waiting_now: int = 0
    dead_by_class: list[tuple[str, int]] = field(default_factory=list)


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


def _counts(session: Session, query: Any) -> dict[int, Any]:
    return {int(row[0]): row for row in session.execute(query)}


def read_series(
    session: Session, identity_ids: list[int], now: datetime, range_name: str
) -> Series:
    """The chart figures of `identity_ids` over the named range ending at `now`."""
    span, bucket = RANGES[range_name]
    width = int(bucket.total_seconds())
    # Buckets aligned to whole steps since 1970, the last one holding `now`.
    last = int(now.timestamp()) // width
    count = int(span / bucket)
    first = last - count + 1
    start = datetime.fromtimestamp(first * width, UTC)
    starts = [start + bucket * i for i in range(count)]
    mine = Message.identity_id.in_(identity_ids)

    def indexed(number: Any) -> int:
        return int(number) - first

    sent_bucket = _bucket(session, Message.sent_at, width)
    sends = _counts(
        session,
        select(
            sent_bucket,
            func.count(),
            func.sum(
                case(
                    (or_(Message.delivered_at.is_not(None), Message.read_at.is_not(None)), 1),
                    else_=0,
                )
            ),
            func.max(_epoch(session, Message.sent_at) - _epoch(session, Message.queued_at)),
        )
        .where(mine, Message.sent_at >= start)
        .group_by(sent_bucket),
    )
    delivered_bucket = _bucket(session, Message.delivered_at, width)
    delivered = _counts(
        session,
        select(delivered_bucket, func.count())
        .where(mine, Message.delivered_at >= start)
        .group_by(delivered_bucket),
    )
    read_bucket = _bucket(session, Message.read_at, width)
    reads = _counts(
        session,
        select(read_bucket, func.count())
        .where(mine, Message.read_at >= start)
        .group_by(read_bucket),
    )
    failed_bucket = _bucket(session, Message.failed_at, width)
    failures = _counts(
        session,
        select(
            failed_bucket,
            func.count(),
            func.sum(case((Message.sent_at.is_(None), 1), else_=0)),
        )
        .where(mine, Message.status == Status.FAILED.value, Message.failed_at >= start)
        .group_by(failed_bucket),
    )
    queued_bucket = _bucket(session, Message.queued_at, width)
    arrivals = _counts(
        session,
        select(queued_bucket, func.count())
        .where(mine, Message.queued_at >= start)
        .group_by(queued_bucket),
    )
    waiting_now = int(
        session.scalar(
            select(func.count()).where(
                mine, Message.status.in_([Status.QUEUED.value, Status.SENDING.value])
            )
        )
        or 0
    )
    series = Series(
        start=start,
        end=start + span,
        bucket=bucket,
        starts=starts,
        sent=[0] * count,
        delivered=[0] * count,
        read=[0] * count,
        failed=[0] * count,
        delivered_rate=[None] * count,
        waiting=[0] * count,
        longest_wait=[None] * count,
        waiting_now=waiting_now,
    )
    came, left = [0] * count, [0] * count
    for number, row in sends.items():
        i = indexed(number)
        if 0 <= i < count:
            series.sent[i] = int(row[1])
            series.delivered_rate[i] = int(row[2] or 0) / int(row[1]) if row[1] else None
            series.longest_wait[i] = None if row[3] is None else max(0.0, float(row[3]))
            left[i] += int(row[1])
    for found, target in ((delivered, series.delivered), (reads, series.read)):
        for number, row in found.items():
            i = indexed(number)
            if 0 <= i < count:
                target[i] = int(row[1])
    for number, row in failures.items():
        i = indexed(number)
        if 0 <= i < count:
            series.failed[i] = int(row[1])
            left[i] += int(row[2] or 0)  # failed without being sent: it left the queue
    for number, row in arrivals.items():
        i = indexed(number)
        if 0 <= i < count:
            came[i] = int(row[1])
    # Walk back from now: before a bucket, its arrivals had not come and its departures
    # had not left yet.
    depth = waiting_now
    for i in range(count - 1, -1, -1):
        series.waiting[i] = max(0, depth)
        depth = depth - came[i] + left[i]
    series.dead_by_class = dead_letters_by_class(session, identity_ids)
    return series


def dead_letters_by_class(session: Session, identity_ids: list[int]) -> list[tuple[str, int]]:
    """The dead letters now (the dead-letter page's rows), per failure class, most first."""
    found: Counter[str] = Counter()
    for failure_class, number in session.execute(
        select(Message.failure_class, func.count())
        .where(
            and_(
                Message.identity_id.in_(identity_ids),
                Message.status == Status.FAILED.value,
                Message.dead_letter_rank.is_not(None),
            )
        )
        .group_by(Message.failure_class)
    ):
        found[failure_class or "unknown"] += int(number)
    return found.most_common()
