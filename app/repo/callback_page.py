"""What the admins' callbacks page reads and does (`/callbacks`): each endpoint with its
backlog and its recent POSTs, and the replays and re-enabling, each audited."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.callback_models import PENDING, Callback, CallbackEndpoint
from app.crypto import SecretBox
from app.repo.callback_endpoints import (
    create_endpoint,
    get_endpoint,
    list_endpoints,
    roll_secret,
    update_endpoint,
)
from app.repo.callback_outbox import recent_attempts, replay_callback, replay_since
from app.repo.staff import record_audit


@dataclass(frozen=True, slots=True)
class EndpointRow:
    endpoint: CallbackEndpoint
    pending: int
    oldest_pending: datetime | None
    attempts: list[Any]  # (CallbackAttempt, event, message_id, sequence), newest first


def endpoint_rows(session: Session, tenant_id: int | None, attempts: int = 10) -> list[EndpointRow]:
    rows = []
    for endpoint in list_endpoints(session, tenant_id):
        pending, oldest = session.execute(
            select(func.count(), func.min(Callback.created_at)).where(
                Callback.endpoint_id == endpoint.id, Callback.state == PENDING
            )
        ).one()
        rows.append(
            EndpointRow(endpoint, pending, oldest, recent_attempts(session, endpoint.id, attempts))
        )
    return rows


class NotYoursError(LookupError):
    """No endpoint (or callback) of this tenant has that id."""


def _endpoint(session: Session, tenant_id: int | None, endpoint_id: int) -> CallbackEndpoint:
    endpoint = get_endpoint(session, tenant_id, endpoint_id)
    if endpoint is None:
        raise NotYoursError(endpoint_id)
    return endpoint


def replay_one(
    session: Session,
    tenant_id: int | None,
    endpoint_id: int,
    callback_id: int,
    actor: str,
    now: datetime,
) -> None:
    endpoint = _endpoint(session, tenant_id, endpoint_id)
    owner = session.scalar(select(Callback.endpoint_id).where(Callback.id == callback_id))
    if owner != endpoint.id or not replay_callback(session, tenant_id, callback_id, now):
        raise NotYoursError(callback_id)
    record_audit(
        session,
        actor,
        "callback.replay",
        f"callback:{callback_id}",
        now,
        {"endpoint": endpoint.id},
        tenant_id=endpoint.tenant_id,
    )


def replay_from(
    session: Session,
    tenant_id: int | None,
    endpoint_id: int,
    since: datetime,
    actor: str,
    now: datetime,
) -> int:
    endpoint = _endpoint(session, tenant_id, endpoint_id)
    count = replay_since(session, endpoint.id, since, now)
    record_audit(
        session,
        actor,
        "callback.replay_since",
        f"callback_endpoint:{endpoint.id}",
        now,
        {"since": since.isoformat(), "callbacks": count},
        tenant_id=endpoint.tenant_id,
    )
    return count


def add_endpoint(
    session: Session,
    box: SecretBox,
    tenant_id: int,
    url: str,
    host: str,
    events: list[str],
    actor: str,
    now: datetime,
) -> tuple[CallbackEndpoint, str]:
    """(the endpoint, its secret in clear: shown once)."""
    endpoint, secret = create_endpoint(
        session, box, tenant_id=tenant_id, url=url, host=host, events=events, now=now
    )
    record_audit(
        session,
        actor,
        "callback_endpoint.create",
        f"callback_endpoint:{endpoint.id}",
        now,
        {"url": url, "events": endpoint.events},
        tenant_id=tenant_id,
    )
    return endpoint, secret


def roll(
    session: Session,
    box: SecretBox,
    tenant_id: int | None,
    endpoint_id: int,
    overlap: timedelta,
    actor: str,
    now: datetime,
) -> tuple[CallbackEndpoint, str]:
    endpoint = _endpoint(session, tenant_id, endpoint_id)
    secret = roll_secret(session, box, endpoint, now, overlap)
    record_audit(
        session,
        actor,
        "callback_endpoint.roll_secret",
        f"callback_endpoint:{endpoint.id}",
        now,
        {"overlap_seconds": int(overlap.total_seconds())},
        tenant_id=endpoint.tenant_id,
    )
    return endpoint, secret


def set_enabled(
    session: Session,
    tenant_id: int | None,
    endpoint_id: int,
    enabled: bool,
    actor: str,
    now: datetime,
) -> None:
    endpoint = _endpoint(session, tenant_id, endpoint_id)
    update_endpoint(session, endpoint, now, enabled=enabled, by=actor)
    record_audit(
        session,
        actor,
        "callback_endpoint.enable" if enabled else "callback_endpoint.disable",
        f"callback_endpoint:{endpoint.id}",
        now,
        None,
        tenant_id=endpoint.tenant_id,
    )
