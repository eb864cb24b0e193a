"""What `/metrics` reads from the database at scrape time: the same answer on every host.

Per identity and lane: how many messages are due now, when the oldest of them became due
(`due_since`, the overview page's own definition), how many are in flight and how many
wait for a later retry; and per identity, lane and state, how many messages there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, case, func, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Identity, Message, Tenant
from app.repo.claimable import is_due
from app.repo.overview import LANES, due_since


@dataclass(frozen=True, slots=True)
class IdentityLabels:
    id: int
    tenant: str
    provider: str
    paused: bool


@dataclass(slots=True)
class LaneQueue:
    identity: IdentityLabels
    lane: str
    due: int = 0
    oldest_due_at: datetime | None = None
    in_flight: int = 0
    retry_waiting: int = 0

    def oldest_due_age(self, now: datetime) -> float:
        """Seconds the oldest due message has waited; 0 when nothing is due."""
        if self.oldest_due_at is None:
            return 0.0
        return max(0.0, (now - self.oldest_due_at).total_seconds())


def identity_labels(session: Session) -> list[IdentityLabels]:
    query = (
        select(Identity.id, Tenant.name, Identity.provider, Identity.paused_at)
        .join(Tenant, Tenant.id == Identity.tenant_id)
        .order_by(Identity.id)
    )
    return [
        IdentityLabels(row.id, row.name, row.provider, row.paused_at is not None)
        for row in session.execute(query)
    ]


def _count(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def lane_queues(
    session: Session, now: datetime, identities: list[IdentityLabels]
) -> list[LaneQueue]:
    """One row per identity and lane, zeros included, so a series never vanishes."""
    rows = {(i.id, lane): LaneQueue(i, lane) for i in identities for lane in LANES}
    waiting = (
        select(
            Message.identity_id,
            Message.lane,
            _count(is_due(now)).label("due"),
            func.min(case((is_due(now), due_since(now)))).label("oldest"),
            _count(and_(Message.lease_until.is_not(None), Message.lease_until >= now)).label(
                "in_flight"
            ),
            _count(and_(Message.next_attempt_at.is_not(None), Message.next_attempt_at > now)).label(
                "retry_waiting"
            ),
        )
        .where(Message.status.in_([Status.QUEUED.value, Status.SENDING.value]))
        .group_by(Message.identity_id, Message.lane)
    )
    for row in session.execute(waiting):
        lane = rows.get((row.identity_id, row.lane))
        if lane is None:
            continue  # an identity created since the labels were read: next scrape
        lane.due, lane.oldest_due_at = int(row.due), row.oldest
        lane.in_flight, lane.retry_waiting = int(row.in_flight), int(row.retry_waiting)
    return list(rows.values())


def messages_by_state(session: Session) -> list[tuple[int, str, str, int]]:
    """(identity id, lane, state, how many) for every combination that has messages."""
    query = select(
        Message.identity_id, Message.lane, Message.status, func.count().label("n")
    ).group_by(Message.identity_id, Message.lane, Message.status)
    return [(row.identity_id, row.lane, row.status, int(row.n)) for row in session.execute(query)]
