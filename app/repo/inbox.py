"""The webhook inbox: raw deliveries and their statuses, stored before anything is applied.

Each status is stored once (its dedupe key: provider, identity, provider id, status), and
stays unapplied until the reconciler (`app/repo/webhooks.py`) applies, refuses or parks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.models import WebhookDelivery, WebhookStatus
from app.repo.sql import insert_ignoring_conflict, rows_changed


class Result:
    APPLIED = "applied"
    REFUSED = "refused"
    DUPLICATE = "duplicate"
    PARKED = "parked"
    STALE = "stale"  # the provider id belongs to an earlier cycle: recorded, not applied
    IGNORED = "ignored"  # a provider status below `sent`, or one we do not track
    EXPIRED = "expired"  # parked too long: no message ever matched


@dataclass(frozen=True, slots=True)
class IncomingStatus:
    identity_id: int
    provider: str
    provider_message_id: str
    status: str
    provider_time: datetime | None
    correlation_id: str | None = None
    errors: tuple[dict[str, Any], ...] = ()
    failure_class: str | None = None
    raw: dict[str, Any] | None = None

    @property
    def dedupe_key(self) -> str:
        # Scoped to the identity: another tenant naming our provider id cannot shadow ours.
        return f"{self.provider}:{self.identity_id}:{self.provider_message_id}:{self.status}"


def store_delivery(
    session: Session,
    provider: str,
    identity_id: int | None,
    headers: dict[str, str],
    body: str,
    now: datetime,
) -> int:
    delivery = WebhookDelivery(
        provider=provider, identity_id=identity_id, headers=headers, body=body, received_at=now
    )
    session.add(delivery)
    session.flush()
    return delivery.id


def store_statuses(
    session: Session, delivery_id: int, statuses: list[IncomingStatus], now: datetime
) -> tuple[list[int], int]:
    """Insert each status once; returns the new rows' ids and how many were duplicates."""
    new_ids: list[int] = []
    duplicates = 0
    for status in statuses:
        status_id = insert_ignoring_conflict(
            session,
            WebhookStatus.__table__,
            {
                "delivery_id": delivery_id,
                "provider": status.provider,
                "identity_id": status.identity_id,
                "dedupe_key": status.dedupe_key,
                "provider_message_id": status.provider_message_id,
                "correlation_id": status.correlation_id,
                "status": status.status,
                "provider_time": status.provider_time,
                "received_at": now,
                "payload": {
                    "raw": status.raw,
                    "errors": list(status.errors),
                    "failure_class": status.failure_class,
                },
                "tries": 0,
            },
            ["dedupe_key"],
        )
        if status_id is None:
            duplicates += 1
        else:
            new_ids.append(status_id)
    return new_ids, duplicates


def claim_status(session: Session, status_id: int) -> bool:
    return (
        rows_changed(
            session,
            update(WebhookStatus)
            .where(WebhookStatus.id == status_id, WebhookStatus.applied_at.is_(None))
            .values(tries=WebhookStatus.tries + 1),
        )
        == 1
    )


def finish_status(
    session: Session,
    status_id: int,
    applied_at: datetime | None,
    result: str,
    message_id: int | None,
) -> None:
    session.execute(
        update(WebhookStatus)
        .where(WebhookStatus.id == status_id)
        .values(applied_at=applied_at, result=result, message_id=message_id)
    )


def parked_status_ids(session: Session, identity_id: int, provider_message_id: str) -> list[int]:
    return list(
        session.scalars(
            select(WebhookStatus.id)
            .where(
                WebhookStatus.identity_id == identity_id,
                WebhookStatus.provider_message_id == provider_message_id,
                WebhookStatus.applied_at.is_(None),
            )
            .order_by(WebhookStatus.provider_time, WebhookStatus.id)
        )
    )


def pending_status_ids(
    session: Session, now: datetime, parked_window: timedelta, limit: int = 500
) -> list[int]:
    """Statuses to replay: every one whose application failed, and the recently parked.

    A status parks when it beats the send response; the worker applies it when it
    records the id, and this replay covers the short race between the two. Older parked
    ones are mostly other systems' messages (normal): they wait for their id or expire,
    instead of being retried on every pass.
    """
    return list(
        session.scalars(
            select(WebhookStatus.id)
            .where(
                WebhookStatus.applied_at.is_(None),
                or_(
                    WebhookStatus.result.is_(None),
                    WebhookStatus.result != Result.PARKED,
                    WebhookStatus.received_at >= now - parked_window,
                ),
            )
            .order_by(WebhookStatus.id)
            .limit(limit)
        )
    )


def expire_parked(session: Session, now: datetime, max_age: timedelta) -> int:
    """Parked statuses no message ever matched (sends from other systems are normal)."""
    return rows_changed(
        session,
        update(WebhookStatus)
        .where(
            WebhookStatus.applied_at.is_(None),
            WebhookStatus.received_at < now - max_age,
        )
        .values(applied_at=now, result=Result.EXPIRED),
    )
