"""An alert's figures now, beside the ones it fired with: the banner and the alerts page
show both, so a person sees whether a stuck queue is draining or still growing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Identity, Message
from app.repo.alerts import FiringAlert
from app.repo.claimable import is_due
from app.repo.overview import due_since


@dataclass(frozen=True, slots=True)
class LiveFigure:
    due: int | None = None  # a stuck lane: due now
    oldest_due_age: timedelta | None = None
    paused: bool | None = None  # a paused identity: still paused


def live_figures(
    session: Session, alerts: list[FiringAlert], now: datetime
) -> dict[int, LiveFigure]:
    """Per firing alert id, what its condition reads now (stuck lanes and pauses; the
    windowed alerts' own figures are already about the recent past)."""
    stuck = {(a.identity_id, a.lane) for a in alerts if a.kind == "stuck" and a.lane}
    paused = {a.identity_id for a in alerts if a.kind == "paused"}
    waiting: dict[tuple[int, str], tuple[int, datetime | None]] = {}
    if stuck:
        for row in session.execute(
            select(
                Message.identity_id,
                Message.lane,
                func.count().label("due"),
                func.min(case((is_due(now), due_since(now)))).label("oldest"),
            )
            .where(
                Message.identity_id.in_({identity for identity, _ in stuck}),
                Message.status.in_([Status.QUEUED.value, Status.SENDING.value]),
                is_due(now),
            )
            .group_by(Message.identity_id, Message.lane)
        ):
            waiting[(row.identity_id, row.lane)] = (int(row.due), row.oldest)
    still_paused: set[int] = set()
    if paused:
        still_paused = set(
            session.scalars(
                select(Identity.id).where(Identity.id.in_(paused), Identity.paused_at.is_not(None))
            )
        )
    found: dict[int, LiveFigure] = {}
    for alert in alerts:
        if alert.kind == "stuck" and alert.lane:
            due, oldest = waiting.get((alert.identity_id or 0, alert.lane), (0, None))
            age = None if oldest is None else max(timedelta(0), now - oldest)
            found[alert.id] = LiveFigure(due=due, oldest_due_age=age)
        elif alert.kind == "paused":
            found[alert.id] = LiveFigure(paused=alert.identity_id in still_paused)
    return found
