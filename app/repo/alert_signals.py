"""What the alerts read: for every identity (and lane), whether each alert's condition holds
now, with the figures that show why. Reads only; the evaluator (`jobs/alerts.py`) turns
readings into episodes.

The conditions (docs/alerts.md):
- `stuck` per identity and lane: the oldest due message (reusing `due_since`: queued, past
  its retry time or its lease; not one scheduled for later) is older than the threshold
  AND the lane made no claim for the threshold (`app/repo/alert_stuck.py`).
- `paused` per identity: it is paused (a broken sender pauses it; so does an operator).
- `delivery_drop` per identity: delivered-or-read over sent, for sends old enough to have
  been delivered, against the identity's own earlier rate.
- `dwell` per identity: messages `sent` with no delivery for longer than N hours.
- `dead_letters` per identity: more failed messages in the window than the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from app.config import Config
from app.lifecycle import Status
from app.models import Identity, Message
from app.repo.alert_reading import Reading, count_when, iso, name_of
from app.repo.alert_stuck import read_stuck

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


def _bucket(now: datetime, seconds: float) -> str:
    """A coarse anchor for windowed alerts: the window the episode began in."""
    return str(int(now.timestamp() // max(seconds, 1.0)))


def read_alerts(
    session: Session,
    config: Config,
    now: datetime,
    live_workers: Mapping[str, int] | None = None,
) -> list[Reading]:
    """Every alert of every identity, firing or not (a quiet reading clears an episode).
    `live_workers`: RQ's live workers per lane (None: not known), to name a stuck lane's
    cause."""
    identities = list(
        session.execute(
            select(
                Identity.id,
                Identity.tenant_id,
                Identity.provider,
                Identity.account_id,
                Identity.paused_at,
                Identity.paused_reason,
                Identity.campaign_paused_at,
                Identity.stuck_after,
            ).order_by(Identity.id)
        )
    )
    if not identities:
        return []
    readings: list[Reading] = []
    readings += read_stuck(session, config, now, identities, live_workers)
    readings += _paused(identities)
    readings += _delivery_drop(session, config, now, identities)
    readings += _dwell(session, config, now, identities)
    readings += _dead_letters(session, config, now, identities)
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
                f"{name_of(identity)} paused: {identity.paused_reason or 'no reason given'}"
                if identity.paused_at is not None
                else f"{name_of(identity)} is sending"
            ),
            figures={
                "paused_at": iso(identity.paused_at),
                "reason": identity.paused_reason,
            },
            anchor=iso(identity.paused_at) or "",
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
                count_when(recent).label("sent"),
                count_when(and_(recent, reached)).label("delivered"),
                count_when(earlier).label("baseline_sent"),
                count_when(and_(earlier, reached)).label("baseline_delivered"),
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
            f"{name_of(identity)}: {delivered} of {sent} recent sends delivered"
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
                    "window_start": iso(window_start),
                    "window_end": iso(window_end),
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
                    f"{name_of(identity)}: {dwelling} message{'' if dwelling == 1 else 's'} "
                    "sent more than "
                    f"{config.alert_dwell_hours:g} h ago and never delivered"
                ),
                figures={
                    "dwelling": dwelling,
                    "oldest_sent_at": iso(oldest),
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
                    f"{name_of(identity)}: {failed} messages failed in the last "
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
