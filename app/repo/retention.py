"""Retention: a tenant's content is purged after its `retention_days` (30 unless set),
and the facts are kept (docs/api.md, "Retention"; docs/design.md section 2).

Purged: a message's text and its template's parameters (the template's name and language
stay), the provider's raw answers (`raw` in the errors, attempts' response bodies), raw
webhook deliveries' bodies and headers, and their statuses' payloads down to their codes,
and the provider's words in the message's status callbacks.
Kept: every state, time, code, class, provider id, attempt and event, so the pages, the
metrics and the alerts read as before, and the message says when its content went.

Each batch is one short transaction over at most `batch` rows, oldest first, read from
indexes partial on what is not purged yet (migration 0019), and takes only rows nobody
else holds (`SKIP LOCKED`): a send, a webhook or an operator never waits behind a purge.
Only finished messages are purged (sent, delivered, read, failed); one still waiting keeps
its content until it is sent. A purged message cannot be requeued: there is nothing to send.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, exists, select, update
from sqlalchemy.orm import Session

from app.callback_models import Callback
from app.lifecycle import Status
from app.models import (
    DEFAULT_RETENTION_DAYS,
    Attempt,
    Identity,
    Message,
    MessageEvent,
    Tenant,
    WebhookDelivery,
    WebhookStatus,
)

_messages = cast(Table, Message.__table__)
_attempts = cast(Table, Attempt.__table__)
_events = cast(Table, MessageEvent.__table__)
_statuses = cast(Table, WebhookStatus.__table__)

FINISHED = [Status.SENT.value, Status.DELIVERED.value, Status.READ.value, Status.FAILED.value]
# What an error keeps once purged: what a person acts on, never the provider's raw body.
ERROR_FACTS = ("provider", "http_status", "code", "subcode", "title", "trace_id", "type")


@dataclass(frozen=True, slots=True)
class Cutoff:
    """Content of this tenant's (None: no tenant's) received before `before` is purged."""

    tenant_id: int | None
    before: datetime


def cutoffs(session: Session, now: datetime) -> list[Cutoff]:
    """Every tenant's cutoff, and the default's for deliveries that named no identity."""
    rows = session.execute(select(Tenant.id, Tenant.retention_days).order_by(Tenant.id))
    found = [Cutoff(row.id, now - timedelta(days=row.retention_days)) for row in rows]
    return [*found, Cutoff(None, now - timedelta(days=DEFAULT_RETENTION_DAYS))]


def error_facts(error: Any) -> Any:
    """An error dict without its raw body and free text; anything else as it is."""
    if not isinstance(error, dict):
        return error
    return {key: error[key] for key in ERROR_FACTS if key in error}


def _detail_facts(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    if not detail:
        return detail
    cleaned = dict(detail)
    for key in ("error", "previous_error"):
        if key in cleaned:
            cleaned[key] = error_facts(cleaned[key])
    return cleaned


def _template_facts(template: dict[str, Any] | None) -> dict[str, Any] | None:
    if template is None:
        return None
    return {key: template[key] for key in ("name", "language") if key in template}


def payload_facts(payload: dict[str, Any]) -> dict[str, Any]:
    """A webhook status's payload down to what a status means: its word, class and codes."""
    kept: dict[str, Any] = {k: payload[k] for k in ("status", "failure_class") if k in payload}
    errors = payload.get("errors")
    if isinstance(errors, list):
        kept["errors"] = [error_facts(error) for error in errors]
    return kept


def purge_messages(session: Session, cutoff: Cutoff, now: datetime, batch: int) -> int:
    """One batch of the tenant's oldest finished messages created before the cutoff."""
    assert cutoff.tenant_id is not None
    rows = session.execute(
        select(Message.id, Message.template, Message.last_error)
        .where(
            Message.tenant_id == cutoff.tenant_id,
            Message.content_purged_at.is_(None),
            Message.created_at < cutoff.before,
            Message.status.in_(FINISHED),
        )
        .order_by(Message.created_at)
        .limit(batch)
        .with_for_update(skip_locked=True)
    ).all()
    if not rows:
        return 0
    session.execute(
        update(_messages)
        .where(_messages.c.id == bindparam("m_id"))
        .values(
            body_text=None,
            template=bindparam("m_template", type_=_messages.c.template.type),
            last_error=bindparam("m_error", type_=_messages.c.last_error.type),
            content_purged_at=bindparam("m_now", type_=_messages.c.content_purged_at.type),
        ),
        [
            {
                "m_id": row.id,
                "m_template": _template_facts(row.template),
                "m_error": error_facts(row.last_error),
                "m_now": now,
            }
            for row in rows
        ],
    )
    ids = [row.id for row in rows]
    _purge_attempts(session, ids)
    _purge_events(session, ids)
    _purge_callback_payloads(session, ids)
    return len(rows)


def _purge_callback_payloads(session: Session, message_ids: Iterable[int]) -> None:
    """The provider's words leave the messages' callbacks still kept (pending ones, and
    finished ones until app/repo/callback_retention.py deletes them)."""
    found = session.execute(
        select(Callback.id, Callback.payload).where(Callback.message_id.in_(list(message_ids)))
    ).all()
    changed = []
    for row in found:
        error = (row.payload.get("data") or {}).get("error")
        if isinstance(error, dict) and "message" in error:
            data = {
                **row.payload["data"],
                "error": {k: v for k, v in error.items() if k != "message"},
            }
            changed.append({"c_id": row.id, "c_payload": {**row.payload, "data": data}})
    if changed:
        table = cast(Table, Callback.__table__)
        session.execute(
            update(table)
            .where(table.c.id == bindparam("c_id"))
            .values(payload=bindparam("c_payload", type_=table.c.payload.type)),
            changed,
        )


def _purge_attempts(session: Session, message_ids: Iterable[int]) -> None:
    attempts = session.execute(
        select(Attempt.id, Attempt.error).where(Attempt.message_id.in_(list(message_ids)))
    ).all()
    if attempts:
        session.execute(
            update(_attempts)
            .where(_attempts.c.id == bindparam("a_id"))
            .values(response_body=None, error=bindparam("a_error", type_=_attempts.c.error.type)),
            [{"a_id": a.id, "a_error": error_facts(a.error)} for a in attempts],
        )


def _purge_events(session: Session, message_ids: Iterable[int]) -> None:
    events = session.execute(
        select(MessageEvent.id, MessageEvent.detail).where(
            MessageEvent.message_id.in_(list(message_ids)), MessageEvent.detail.is_not(None)
        )
    ).all()
    changed = [
        {"e_id": e.id, "e_detail": _detail_facts(e.detail)}
        for e in events
        if _detail_facts(e.detail) != e.detail
    ]
    if changed:
        session.execute(
            update(_events)
            .where(_events.c.id == bindparam("e_id"))
            .values(detail=bindparam("e_detail", type_=_events.c.detail.type)),
            changed,
        )


def identities_of(session: Session, cutoff: Cutoff) -> list[int | None]:
    """Whose deliveries the cutoff covers: the tenant's identities, or (no tenant) None,
    for deliveries that named no identity of ours."""
    if cutoff.tenant_id is None:
        return [None]
    return list(
        session.scalars(
            select(Identity.id).where(Identity.tenant_id == cutoff.tenant_id).order_by(Identity.id)
        )
    )


def purge_deliveries(
    session: Session, identity_id: int | None, before: datetime, now: datetime, batch: int
) -> int:
    """One batch of an identity's raw webhook deliveries received before `before` (None:
    those naming no identity of ours), and their statuses' payloads. One identity at a
    time, so the index gives the oldest first without reading the rest. A delivery with a
    status still to apply waits: the replay needs its payload (parked ones expire)."""
    owner = (
        WebhookDelivery.identity_id == identity_id
        if identity_id is not None
        else WebhookDelivery.identity_id.is_(None)
    )
    pending = exists().where(
        and_(
            WebhookStatus.delivery_id == WebhookDelivery.id,
            WebhookStatus.applied_at.is_(None),
        )
    )
    ids = list(
        session.scalars(
            select(WebhookDelivery.id)
            .where(
                owner,
                WebhookDelivery.purged_at.is_(None),
                WebhookDelivery.received_at < before,
                ~pending,
            )
            .order_by(WebhookDelivery.received_at)
            .limit(batch)
            .with_for_update(skip_locked=True)
        )
    )
    if not ids:
        return 0
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id.in_(ids))
        .values(body="", headers={}, purged_at=now)
        .execution_options(synchronize_session=False)
    )
    statuses = session.execute(
        select(WebhookStatus.id, WebhookStatus.payload).where(WebhookStatus.delivery_id.in_(ids))
    ).all()
    if statuses:
        session.execute(
            update(_statuses)
            .where(_statuses.c.id == bindparam("s_id"))
            .values(payload=bindparam("s_payload", type_=_statuses.c.payload.type)),
            [{"s_id": s.id, "s_payload": payload_facts(s.payload or {})} for s in statuses],
        )
    return len(ids)
