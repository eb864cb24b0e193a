"""The overview and stuck pages' questions: per identity and lane, how much is due, how old
the oldest due message is, what is in flight, what went through in the last hour; and which
messages have waited longer than the stuck threshold, with why where it is known."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, case, func, or_, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Identity, Message, Tenant
from app.repo.claimable import is_due

LANES = ("reply", "campaign")
LAST_HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class IdentityLabel:
    id: int
    tenant_id: int
    tenant_name: str
    provider: str
    account_id: str
    sender: str | None
    paused_at: datetime | None
    paused_reason: str | None
    campaign_paused_at: datetime | None = None
    campaign_paused_reason: str | None = None

    def pause_of(self, lane: str) -> tuple[datetime, str] | None:
        """(since, reason) of what stops this lane: the identity's pause, or the campaign
        lane's own; None when it sends."""
        if self.paused_at is not None:
            return self.paused_at, self.paused_reason or "no reason given"
        if lane == "campaign" and self.campaign_paused_at is not None:
            return self.campaign_paused_at, (
                f"campaign lane paused: {self.campaign_paused_reason or 'no reason given'}"
            )
        return None


@dataclass(slots=True)
class LaneRow:
    identity: IdentityLabel
    lane: str
    due: int = 0
    oldest_due_at: datetime | None = None
    in_flight: int = 0
    retry_later: int = 0
    sent: int = 0
    delivered: int = 0
    read: int = 0
    failed: int = 0
    dead_letters: int = 0

    def oldest_due_age(self, now: datetime) -> timedelta | None:
        return None if self.oldest_due_at is None else max(timedelta(0), now - self.oldest_due_at)

    def health(self, now: datetime, stuck_after: timedelta) -> str:
        """`paused`, `stuck` (the oldest due message waited past the threshold) or `ok`."""
        if self.identity.pause_of(self.lane) is not None:
            return "paused"
        age = self.oldest_due_age(now)
        if age is not None and age > stuck_after:
            return "stuck"
        return "ok"


def due_since(now: datetime) -> ColumnElement[datetime]:
    """When a due message became due: queued (or its `send_at`, if later), its retry
    time, or its lease's end."""
    return case(
        (
            Message.status == Status.QUEUED.value,
            func.coalesce(Message.not_before, Message.queued_at),
        ),
        (
            and_(Message.next_attempt_at.is_not(None), Message.next_attempt_at <= now),
            Message.next_attempt_at,
        ),
        (and_(Message.lease_until.is_not(None), Message.lease_until < now), Message.lease_until),
        else_=func.coalesce(Message.last_attempt_at, Message.sending_at, Message.queued_at),
    )


def list_identities(session: Session, tenant_id: int | None) -> list[IdentityLabel]:
    query = (
        select(Identity, Tenant.name)
        .join(Tenant, Tenant.id == Identity.tenant_id)
        .order_by(Tenant.name, Identity.id)
    )
    if tenant_id is not None:
        query = query.where(Identity.tenant_id == tenant_id)
    return [
        IdentityLabel(
            identity.id,
            identity.tenant_id,
            tenant_name,
            identity.provider,
            identity.account_id,
            identity.sender,
            identity.paused_at,
            identity.paused_reason,
            identity.campaign_paused_at,
            identity.campaign_paused_reason,
        )
        for identity, tenant_name in session.execute(query)
    ]


def list_tenants(session: Session) -> list[tuple[int, str]]:
    return [(row.id, row.name) for row in session.execute(select(Tenant.id, Tenant.name))]


def _count(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def overview(
    session: Session, now: datetime, stuck_after: timedelta, tenant_id: int | None
) -> list[LaneRow]:
    """One row per identity and lane, trouble first: stuck, then paused, then the rest."""
    identities = list_identities(session, tenant_id)
    rows = {(i.id, lane): LaneRow(i, lane) for i in identities for lane in LANES}
    if not rows:
        return []
    ids = [i.id for i in identities]
    scope = Message.identity_id.in_(ids)
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
                "retry_later"
            ),
        )
        .where(scope, Message.status.in_([Status.QUEUED.value, Status.SENDING.value]))
        .group_by(Message.identity_id, Message.lane)
    )
    for row in session.execute(waiting):
        lane = rows.get((row.identity_id, row.lane))
        if lane is not None:
            lane.due, lane.oldest_due_at = int(row.due), row.oldest
            lane.in_flight, lane.retry_later = int(row.in_flight), int(row.retry_later)
    # The last hour: one range per state time (each indexed), so it reads the hour's rows
    # only, however long the history is.
    since = now - LAST_HOUR
    failed_recently = and_(Message.status == Status.FAILED.value, Message.failed_at >= since)
    hour = (
        select(
            Message.identity_id,
            Message.lane,
            _count(Message.sent_at >= since).label("sent"),
            _count(Message.delivered_at >= since).label("delivered"),
            _count(Message.read_at >= since).label("read"),
            _count(failed_recently).label("failed"),
        )
        .where(
            scope,
            or_(
                Message.sent_at >= since,
                Message.delivered_at >= since,
                Message.read_at >= since,
                failed_recently,
            ),
        )
        .group_by(Message.identity_id, Message.lane)
    )
    for row in session.execute(hour):
        lane = rows.get((row.identity_id, row.lane))
        if lane is not None:
            lane.sent, lane.delivered, lane.read = int(row.sent), int(row.delivered), int(row.read)
            lane.failed = int(row.failed)
    # Dead letters as the dead-letter page lists them (failed, neither canceled nor
    # dismissed): counted from a partial index of those rows alone (index-only).
    dead = (
        select(Message.identity_id, Message.lane, func.count().label("dead"))
        .where(scope, Message.status == Status.FAILED.value, Message.dead_letter_rank.is_not(None))
        .group_by(Message.identity_id, Message.lane)
    )
    for row in session.execute(dead):
        lane = rows.get((row.identity_id, row.lane))
        if lane is not None:
            lane.dead_letters = int(row.dead)
    order = {"stuck": 0, "paused": 1, "ok": 2}

    def trouble_first(lane: LaneRow) -> tuple[int, float, int, int]:
        age = lane.oldest_due_age(now)
        return (
            order[lane.health(now, stuck_after)],
            -(age.total_seconds() if age else 0.0),
            lane.identity.id,
            LANES.index(lane.lane),
        )

    return sorted(rows.values(), key=trouble_first)


@dataclass(frozen=True, slots=True)
class StuckMessage:
    id: int
    identity: IdentityLabel
    lane: str
    status: str
    cycle: int
    attempt: int
    queued_at: datetime | None
    why: str


def stuck_messages(
    session: Session,
    now: datetime,
    stuck_after: timedelta,
    tenant_id: int | None,
    limit: int = 200,
) -> list[StuckMessage]:
    """Messages queued or sending for longer than the threshold, oldest first."""
    identities = {i.id: i for i in list_identities(session, tenant_id)}
    if not identities:
        return []
    query = (
        select(Message)
        .where(
            Message.identity_id.in_(list(identities)),
            Message.status.in_([Status.QUEUED.value, Status.SENDING.value]),
            Message.queued_at < now - stuck_after,
            # A scheduled message waits for its time: stuck only that long after it.
            or_(Message.not_before.is_(None), Message.not_before < now - stuck_after),
        )
        .order_by(Message.queued_at, Message.id)
        .limit(limit)
    )
    found = []
    for message in session.scalars(query):
        identity = identities[message.identity_id]
        found.append(
            StuckMessage(
                id=message.id,
                identity=identity,
                lane=message.lane,
                status=message.status,
                cycle=message.cycle,
                attempt=message.attempt,
                queued_at=message.queued_at,
                why=why_waiting(message, identity, now),
            )
        )
    return found


def _at(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S UTC")


def _ago(moment: datetime, now: datetime) -> str:
    return f"{int((now - moment).total_seconds())} s ago"


def why_waiting(message: Message, identity: IdentityLabel, now: datetime) -> str:
    """Why a message that has not gone out yet is still waiting, in a support person's words."""
    if identity.paused_at is not None:
        return f"identity paused: {identity.paused_reason or 'no reason given'}"
    if message.lane == "campaign" and identity.campaign_paused_at is not None:
        return (
            f"campaign lane paused: {identity.campaign_paused_reason or 'no reason given'} "
            "(replies go on)"
        )
    if message.status == Status.QUEUED.value:
        return "never claimed: no worker has picked it up (are the lane's workers running?)"
    if message.pending_verdict:
        return (
            f"waiting for the provider's webhook before recording {message.pending_verdict} "
            f"(after {message.unknown_attempts} unknown outcomes)"
        )
    if message.lease_until is not None and message.lease_until >= now:
        return f"attempt {message.attempt} in flight until {_at(message.lease_until)}"
    if message.lease_until is not None:
        return (
            f"lease expired {_ago(message.lease_until, now)}: the worker was lost; "
            "the sweeper re-rings it"
        )
    if message.next_attempt_at is not None and message.next_attempt_at > now:
        if message.failure_class in ("rate_limited", "pair_limited"):
            return f"waiting on a rate limit until {_at(message.next_attempt_at)}"
        if message.failure_class == "unknown":
            return (
                f"retry scheduled at {_at(message.next_attempt_at)} after an unknown outcome "
                "(waiting for the provider's webhook first)"
            )
        return f"retry scheduled at {_at(message.next_attempt_at)}"
    if message.next_attempt_at is not None:
        return f"retry due {_ago(message.next_attempt_at, now)}, not claimed yet"
    return "held for a broken sender; due again now that the identity is active"
