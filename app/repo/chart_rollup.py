"""The charts' rollup: each identity's figures per closed bucket of 15 minutes and of an
hour (`chart_rollups`), folded by the sweeper, read by the day's and the week's charts.

Nothing on the send or webhook path writes here. Each sweeper pass (`fold_charts`), per
width:

1. Slide the window: keep a week and a bucket; rows older than that are deleted.
2. Fold again every bucket a change touched since the last pass. The change feed is
   `message_events` (every change of a message, applied or refused, is an event, on the
   indexed `received_at`), read from the last pass's time less `FEED_SLACK`, so that a
   transaction that took its time before committing is still seen; reading a change twice
   only folds a bucket twice. A changed message marks the buckets of its timestamps now,
   and, after a requeue (which clears them), the buckets of its earlier cycles' events,
   where those timestamps came from (our clock or the provider's, both on the event).
   This is how late rows reach closed buckets: a delivery for a send of an hour ago, a
   late `sent` filling its time, a failure requeued.
3. Fold the next closed buckets, oldest first, at most `BATCH` a pass, once each has been
   closed for `SETTLE` (a row written just before the end of a bucket has committed).

A fold replaces the bucket's rows of the identities it folds with a fresh aggregate
(`app/repo/chart_sql.py`, the same one the live charts use), so folding twice never counts
twice, and a folded bucket shows exactly what aggregating it now would.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from app.models import ChartFoldMark, ChartRollup, Identity, Message, MessageEvent
from app.repo.chart_sql import Figures, Key, aggregate

WIDTHS = (900, 3600)  # the day's buckets and the week's
WINDOW = timedelta(days=7)
SETTLE = timedelta(seconds=30)
FEED_SLACK = timedelta(seconds=60)
BATCH = 24  # closed buckets folded a pass, per width (a week of hours is 168)
CHUNK = 500  # ids per IN list

_TIMES = ("queued_at", "sent_at", "delivered_at", "read_at", "failed_at")


def _number(moment: datetime, width: int) -> int:
    return int(moment.timestamp()) // width


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(ids), CHUNK):
        yield ids[i : i + CHUNK]


def fold_range(session: Session, width: int, low: int, high: int, identity_ids: list[int]) -> None:
    """Replace the rows of buckets `low <= b < high` of `identity_ids` with a fresh fold."""
    if not identity_ids:
        return
    found = aggregate(session, identity_ids, width, low, high, per_identity=True)
    session.execute(
        delete(ChartRollup).where(
            ChartRollup.width == width,
            ChartRollup.identity_id.in_(identity_ids),
            ChartRollup.bucket >= low,
            ChartRollup.bucket < high,
        )
    )
    rows = [
        {"width": width, "identity_id": identity, "bucket": bucket, **_values(figures)}
        for (identity, bucket), figures in sorted(found.items())
        if not figures.is_empty()
    ]
    if rows:
        session.execute(insert(ChartRollup), rows)


def _values(figures: Figures) -> dict[str, int | float | None]:
    return {name: getattr(figures, name) for name in Figures.__slots__}


def changed_times(session: Session, since: datetime) -> list[tuple[int, datetime]]:
    """(identity, time) of every chart time of the messages changed since `since`."""
    changed = sorted(
        session.scalars(
            select(MessageEvent.message_id).where(MessageEvent.received_at >= since).distinct()
        )
    )
    times: list[tuple[int, datetime]] = []
    for ids in _chunks(changed):
        identity_of: dict[int, int] = {}
        for row in session.execute(
            select(Message.id, Message.identity_id, *(getattr(Message, t) for t in _TIMES)).where(
                Message.id.in_(ids)
            )
        ):
            identity_of[row[0]] = row[1]
            times.extend((row[1], moment) for moment in row[2:] if moment is not None)
        # A requeue cleared the earlier cycle's times: its events name where they were.
        requeued = select(MessageEvent.message_id).where(
            MessageEvent.message_id.in_(ids),
            MessageEvent.kind == "requeue",
            MessageEvent.received_at >= since,
        )
        for message_id, received, provider in session.execute(
            select(
                MessageEvent.message_id, MessageEvent.received_at, MessageEvent.provider_time
            ).where(MessageEvent.message_id.in_(requeued))
        ):
            identity = identity_of.get(message_id)
            if identity is not None:
                times.extend((identity, m) for m in (received, provider) if m is not None)
    return times


def _dirty(
    times: Iterable[tuple[int, datetime]], width: int, low: int, high: int
) -> dict[int, set[int]]:
    """Folded buckets (`low <= b < high`) the times fall in, each with its identities."""
    dirty: dict[int, set[int]] = defaultdict(set)
    for identity, moment in times:
        number = _number(moment, width)
        if low <= number < high:
            dirty[number].add(identity)
    return dirty


@dataclass(frozen=True, slots=True)
class Folded:
    new: int  # closed buckets folded the first time
    again: int  # folded buckets a change touched, folded again


def fold_charts(session: Session, now: datetime) -> Folded:
    """One pass of the rollup (the module's steps): the buckets folded, per width."""
    identity_ids = list(session.scalars(select(Identity.id).order_by(Identity.id)))
    marks = {
        mark.width: mark
        for mark in session.scalars(select(ChartFoldMark).with_for_update())  # one folder
    }
    seen = [m.changes_seen_at for m in marks.values() if m.changes_seen_at is not None]
    times = changed_times(session, min(seen) - FEED_SLACK) if seen else []
    new = again = 0
    for width in WIDTHS:
        current = _number(now, width)
        window_from = current - int(WINDOW.total_seconds()) // width - 1
        closed_to = _number(now - SETTLE, width)
        mark = marks.get(width)
        if mark is None:
            mark = ChartFoldMark(width=width, folded_from=window_from, folded_to=window_from)
            session.add(mark)
        # 1. The window slides (once a bucket); a sweeper stopped for longer than the window
        #    starts again from its start.
        if mark.folded_to < window_from:
            mark.folded_to = window_from
        if mark.folded_from < window_from:
            session.execute(
                delete(ChartRollup).where(
                    ChartRollup.width == width, ChartRollup.bucket < window_from
                )
            )
            mark.folded_from = window_from
        # 2. Buckets already folded that a change touched since.
        for number, identities in sorted(
            _dirty(times, width, mark.folded_from, mark.folded_to).items()
        ):
            for ids in _chunks(sorted(identities)):
                fold_range(session, width, number, number + 1, ids)
            again += 1
        # 3. The next closed buckets.
        high = min(closed_to, mark.folded_to + BATCH)
        if high > mark.folded_to:
            for ids in _chunks(identity_ids):
                fold_range(session, width, mark.folded_to, high, ids)
            new += high - mark.folded_to
            mark.folded_to = high
        mark.changes_seen_at = now
    return Folded(new, again)


def read_rollup(
    session: Session, identity_ids: list[int], width: int, low: int
) -> tuple[int, dict[Key, Figures]]:
    """The rolled-up figures of buckets from `low` summed over `identity_ids`, and the first
    bucket not folded (`low` itself when the rollup cannot answer from `low`)."""
    mark = session.get(ChartFoldMark, width)
    if mark is None or mark.folded_from > low or mark.folded_to <= low:
        return low, {}
    found: dict[Key, Figures] = {}
    for ids in _chunks(identity_ids):
        query = (
            select(
                ChartRollup.bucket,
                func.sum(ChartRollup.sent),
                func.sum(ChartRollup.sent_delivered),
                func.max(ChartRollup.longest_wait),
                func.sum(ChartRollup.delivered),
                func.sum(ChartRollup.read),
                func.sum(ChartRollup.failed),
                func.sum(ChartRollup.failed_unsent),
                func.sum(ChartRollup.arrivals),
            )
            .where(
                ChartRollup.width == width,
                ChartRollup.identity_id.in_(ids),
                ChartRollup.bucket >= low,
                ChartRollup.bucket < mark.folded_to,
            )
            .group_by(ChartRollup.bucket)
        )
        for row in session.execute(query):
            bucket, sent, sent_delivered, wait, *counts = cast(tuple[Any, ...], row)
            part = Figures(
                int(sent),
                int(sent_delivered),
                None if wait is None else float(wait),
                *(int(c) for c in counts),
            )
            found.setdefault((0, int(bucket)), Figures()).add(part)
    return mark.folded_to, found
