"""What the alerts read: for every identity (and lane), whether each alert's condition holds
now, with the figures that show why. Reads only; the evaluator (`jobs/alerts.py`) turns
readings into episodes.

The conditions (docs/alerts.md):
- `stuck` per identity and lane: the oldest due message (reusing `due_since`: queued, past
  its retry time or its lease; not one scheduled for later) is older than the threshold
  AND the lane made no claim for the threshold. A paced backlog claims every slot: quiet.
- `paused` per identity: it is paused (a broken sender pauses it; so does an operator).
- `delivery_drop` per identity: delivered-or-read over sent, for sends old enough to have
  been delivered, against the identity's own earlier rate.
- `dwell` per identity: messages `sent` with no delivery for longer than N hours.
- `dead_letters` per identity: more failed messages in the window than the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from app.config import Config
from app.lifecycle import Status
from app.models import Identity, Message
from app.repo.claims import is_due
from app.repo.overview import LANES, due_since

KINDS = (
    "stuck",
    "paused",
    "delivery_drop",
    "dwell",
    "dead_letters",
    "template_held",
    "callbacks_disabled",
)
KIND_TITLES = {
    "stuck": "Queue stuck",
    "paused": "Identity paused",
    "delivery_drop": "Delivered rate dropped",
    "dwell": "Sent, never delivered",
    "dead_letters": "Dead letters growing",
    "template_held": "Template held by Meta",  # app/repo/alert_templates.py
    "callbacks_disabled": "Callback endpoint disabled",  # app/repo/callback_alerts.py
}


@dataclass(frozen=True, slots=True)
class Reading:
    """One alert's condition now. `anchor` is when the trouble began where the data says
    it (the last claim, the pause), so an episode's id can be derived again after a
    restart; `firing` says whether the condition holds."""

    alert_key: str
    kind: str
    tenant_id: int
    identity_id: int | None
    lane: str | None
    firing: bool
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)
    anchor: str = ""


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _seconds(delta: timedelta | None) -> float | None:
    return None if delta is None else round(delta.total_seconds(), 3)


def _name(identity: Any) -> str:
    return f"{identity.provider} {identity.account_id} (identity {identity.id})"


def _count(condition: Any) -> Any:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def _bucket(now: datetime, seconds: float) -> str:
    """A coarse anchor for windowed alerts: the window the episode began in."""
    return str(int(now.timestamp() // max(seconds, 1.0)))


def read_alerts(session: Session, config: Config, now: datetime) -> list[Reading]:
    """Every alert of every identity, firing or not (a quiet reading clears an episode)."""
    identities = list(
        session.execute(
            select(
                Identity.id,
                Identity.tenant_id,
                Identity.provider,
                Identity.account_id,
                Identity.paused_at,
                Identity.paused_reason,
                Identity.stuck_after,
            ).order_by(Identity.id)
        )
    )
    if not identities:
        return []
    readings: list[Reading] = []
    readings += _stuck(session, config, now, identities)
    readings += _paused(identities)
    readings += _delivery_drop(session, config, now, identities)
    readings += _dwell(session, config, now, identities)
    readings += _dead_letters(session, config, now, identities)
    return readings


def _stuck(session: Session, config: Config, now: datetime, identities: list[Any]) -> list[Reading]:
    waiting = {
        (row.identity_id, row.lane): row
        for row in session.execute(
            select(
                Message.identity_id,
                Message.lane,
                _count(is_due(now)).label("due"),
                func.min(case((is_due(now), due_since(now)))).label("oldest"),
            )
            .where(Message.status.in_([Status.QUEUED.value, Status.SENDING.value]))
            .group_by(Message.identity_id, Message.lane)
        )
    }

    # Progress is a claim: every claim stamps `last_attempt_at`. One newest-claim lookup
    # per identity and lane, each a short backward scan of ix_messages_last_claim.
    def newest_claim(lane: str) -> Any:
        return (
            select(func.max(Message.last_attempt_at))
            .where(Message.identity_id == Identity.id, Message.lane == lane)
            .scalar_subquery()
        )

    claims: dict[tuple[int, str], datetime | None] = {}
    for row in session.execute(
        select(Identity.id, *(newest_claim(lane).label(lane) for lane in LANES))
    ):
        for lane in LANES:
            claims[(row.id, lane)] = getattr(row, lane)
    readings = []
    for identity in identities:
        threshold = timedelta(
            seconds=identity.stuck_after if identity.stuck_after is not None else config.stuck_after
        )
        for lane in LANES:
            found = waiting.get((identity.id, lane))
            due = int(found.due) if found is not None else 0
            oldest = found.oldest if found is not None else None
            age = None if oldest is None else max(timedelta(0), now - oldest)
            last_claim = claims.get((identity.id, lane))
            idle = None if last_claim is None else max(timedelta(0), now - last_claim)
            firing = age is not None and age > threshold and (idle is None or idle > threshold)
            paused = identity.paused_at is not None
            why = (
                f"identity paused: {identity.paused_reason or 'no reason given'}"
                if paused
                else "is a worker running for this lane?"
            )
            summary = (
                f"{_name(identity)}, {lane} lane: {due} due, the oldest waiting "
                f"{int(age.total_seconds()) if age else 0} s; "
                + (
                    f"no claim for {int(idle.total_seconds())} s"
                    if idle is not None
                    else "never claimed"
                )
                + (f" ({why})" if firing else "")
            )
            readings.append(
                Reading(
                    alert_key=f"stuck:{identity.id}:{lane}",
                    kind="stuck",
                    tenant_id=identity.tenant_id,
                    identity_id=identity.id,
                    lane=lane,
                    firing=firing,
                    summary=summary,
                    figures={
                        "due": due,
                        "oldest_due_age_seconds": _seconds(age),
                        "seconds_since_last_claim": _seconds(idle),
                        "last_claim_at": _iso(last_claim),
                        "threshold_seconds": threshold.total_seconds(),
                        "identity_paused": paused,
                    },
                    # While a lane is stuck nothing claims, so its last claim stands still.
                    anchor=_iso(last_claim) or "never claimed",
                )
            )
    return readings


def _paused(identities: list[Any]) -> list[Reading]:
    return [
        Reading(
            alert_key=f"paused:{identity.id}",
            kind="paused",
            tenant_id=identity.tenant_id,
            identity_id=identity.id,
            lane=None,
            firing=identity.paused_at is not None,
            summary=(
                f"{_name(identity)} paused: {identity.paused_reason or 'no reason given'}"
                if identity.paused_at is not None
                else f"{_name(identity)} is sending"
            ),
            figures={
                "paused_at": _iso(identity.paused_at),
                "reason": identity.paused_reason,
            },
            anchor=_iso(identity.paused_at) or "",
        )
        for identity in identities
    ]


def _delivery_drop(
    session: Session, config: Config, now: datetime, identities: list[Any]
) -> list[Reading]:
    # Sends younger than the settle time may simply not be delivered yet: left out.
    window_end = now - timedelta(seconds=config.alert_rate_settle)
    window_start = window_end - timedelta(seconds=config.alert_rate_window)
    baseline_start = window_start - timedelta(seconds=config.alert_rate_baseline)
    reached = or_(Message.delivered_at.is_not(None), Message.read_at.is_not(None))
    recent = and_(Message.sent_at >= window_start, Message.sent_at < window_end)
    earlier = Message.sent_at < window_start
    counts = {
        row.identity_id: row
        for row in session.execute(
            select(
                Message.identity_id,
                _count(recent).label("sent"),
                _count(and_(recent, reached)).label("delivered"),
                _count(earlier).label("baseline_sent"),
                _count(and_(earlier, reached)).label("baseline_delivered"),
            )
            .where(Message.sent_at >= baseline_start, Message.sent_at < window_end)
            .group_by(Message.identity_id)
        )
    }
    readings = []
    for identity in identities:
        row = counts.get(identity.id)
        sent = int(row.sent) if row else 0
        delivered = int(row.delivered) if row else 0
        base_sent = int(row.baseline_sent) if row else 0
        base_delivered = int(row.baseline_delivered) if row else 0
        rate = delivered / sent if sent else None
        baseline = base_delivered / base_sent if base_sent else None
        enough = sent >= config.alert_rate_min_sends and base_sent >= config.alert_rate_min_sends
        firing = bool(
            enough
            and rate is not None
            and baseline
            and rate < baseline * (1.0 - config.alert_rate_drop)
        )
        summary = (
            f"{_name(identity)}: {delivered} of {sent} recent sends delivered"
            + (f" ({rate:.0%})" if rate is not None else "")
            + (f" against {baseline:.0%} of {base_sent} before" if baseline is not None else "")
        )
        readings.append(
            Reading(
                alert_key=f"delivery_drop:{identity.id}",
                kind="delivery_drop",
                tenant_id=identity.tenant_id,
                identity_id=identity.id,
                lane=None,
                firing=firing,
                summary=summary,
                figures={
                    "sent": sent,
                    "delivered": delivered,
                    "delivered_rate": None if rate is None else round(rate, 4),
                    "baseline_sent": base_sent,
                    "baseline_delivered": base_delivered,
                    "baseline_rate": None if baseline is None else round(baseline, 4),
                    "window_start": _iso(window_start),
                    "window_end": _iso(window_end),
                },
                anchor=_bucket(now, config.alert_rate_window),
            )
        )
    return readings


def is_dwelling(now: datetime, dwell: timedelta) -> Any:
    """Sent, never delivered or read, for longer than `dwell`."""
    return and_(
        Message.status == Status.SENT.value,
        Message.sent_at < now - dwell,
        Message.delivered_at.is_(None),
        Message.read_at.is_(None),
    )


def _dwell(session: Session, config: Config, now: datetime, identities: list[Any]) -> list[Reading]:
    dwell = timedelta(hours=config.alert_dwell_hours)
    counts = {
        row.identity_id: row
        for row in session.execute(
            select(
                Message.identity_id,
                func.count().label("dwelling"),
                func.min(Message.sent_at).label("oldest"),
            )
            .where(is_dwelling(now, dwell))
            .group_by(Message.identity_id)
        )
    }
    readings = []
    for identity in identities:
        row = counts.get(identity.id)
        dwelling = int(row.dwelling) if row else 0
        oldest = row.oldest if row else None
        readings.append(
            Reading(
                alert_key=f"dwell:{identity.id}",
                kind="dwell",
                tenant_id=identity.tenant_id,
                identity_id=identity.id,
                lane=None,
                firing=dwelling > 0,
                summary=(
                    f"{_name(identity)}: {dwelling} message{'' if dwelling == 1 else 's'} "
                    "sent more than "
                    f"{config.alert_dwell_hours:g} h ago and never delivered"
                ),
                figures={
                    "dwelling": dwelling,
                    "oldest_sent_at": _iso(oldest),
                    "dwell_hours": config.alert_dwell_hours,
                },
                anchor=_bucket(now, dwell.total_seconds()),
            )
        )
    return readings


def _dead_letters(
    session: Session, config: Config, now: datetime, identities: list[Any]
) -> list[Reading]:
    window = timedelta(seconds=config.alert_dead_letter_window)
    counts = {
        row.identity_id: int(row.failed)
        for row in session.execute(
            select(Message.identity_id, func.count().label("failed"))
            .where(Message.status == Status.FAILED.value, Message.failed_at >= now - window)
            .group_by(Message.identity_id)
        )
    }
    readings = []
    for identity in identities:
        failed = counts.get(identity.id, 0)
        readings.append(
            Reading(
                alert_key=f"dead_letters:{identity.id}",
                kind="dead_letters",
                tenant_id=identity.tenant_id,
                identity_id=identity.id,
                lane=None,
                firing=failed >= config.alert_dead_letters,
                summary=(
                    f"{_name(identity)}: {failed} messages failed in the last "
                    f"{int(window.total_seconds())} s (threshold {config.alert_dead_letters})"
                ),
                figures={
                    "failed_in_window": failed,
                    "window_seconds": window.total_seconds(),
                    "threshold": config.alert_dead_letters,
                },
                anchor=_bucket(now, window.total_seconds()),
            )
        )
    return readings


@dataclass(frozen=True, slots=True)
class DwellingMessage:
    id: int
    identity_id: int
    lane: str
    recipient: str
    provider_message_id: str | None
    sent_at: datetime | None


def dwelling_messages(
    session: Session, now: datetime, dwell: timedelta, tenant_id: int | None, limit: int = 100
) -> list[DwellingMessage]:
    """The messages the dwell alert is about, the longest waiting first."""
    query = select(
        Message.id,
        Message.identity_id,
        Message.lane,
        Message.recipient,
        Message.provider_message_id,
        Message.sent_at,
    ).where(is_dwelling(now, dwell))
    if tenant_id is not None:
        query = query.where(Message.tenant_id == tenant_id)
    query = query.order_by(Message.sent_at, Message.id).limit(limit)
    return [DwellingMessage(*row) for row in session.execute(query)]
