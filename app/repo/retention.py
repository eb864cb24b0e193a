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

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Table,
    and_,
    any_,
    bindparam,
    exists,
    select,
    update,
)
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
from app.repo.sql import is_postgresql

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
        .with_for_update(skip_locked=True, key_share=True)
    ).all()
    if not rows:
        return 0
    changes = []
    for row in rows:
        values: dict[str, Any] = {}
        template, error = _template_facts(row.template), error_facts(row.last_error)
        if template != row.template:
            values["template"] = template
        if error != row.last_error:
            values["last_error"] = error
        changes.append((row.id, values))
    _update_grouped(session, _messages, changes, body_text=None, content_purged_at=now)
    ids = [row.id for row in rows]
    _purge_attempts(session, ids)
    _purge_events(session, ids)
    _purge_callback_payloads(session, ids)
    return len(rows)


def _update_grouped(
    session: Session, table: Table, changes: list[tuple[int, dict[str, Any]]], **same: Any
) -> None:
    """Set `same` on every row `changes` names, and each row's own values: one UPDATE per
    distinct set of values, not one per row. A batch's rows mostly share theirs (no error
    to trim, the same template, the same status word), so a batch of 200 rows costs a
    handful of statements: the purge spends less of the CPU that intake shares with it."""
    groups: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for row_id, values in changes:
        key = json.dumps(values, sort_keys=True, default=str) if values else ""
        groups.setdefault(key, (values, []))[1].append(row_id)
    for values, ids in groups.values():
        if same or values:
            session.execute(
                update(table).where(_among(session, table.c.id, ids)).values(**same, **values)
            )


def _among(session: Session, column: Any, ids: Iterable[int]) -> ColumnElement[bool]:
    """`column IN ids`; on PostgreSQL as `= ANY(array)`, one parameter for the batch (an
    IN list of 200 is 200 parameters, rendered and sent anew for every statement)."""
    if is_postgresql(session):
        return cast(
            ColumnElement[bool], column == any_(bindparam(None, list(ids), ARRAY(BigInteger)))
        )
    return cast(ColumnElement[bool], column.in_(list(ids)))


def _purge_callback_payloads(session: Session, message_ids: Iterable[int]) -> None:
    """The provider's words leave the messages' callbacks still kept (pending ones, and
    finished ones until app/repo/callback_retention.py deletes them)."""
    found = session.execute(
        select(Callback.id, Callback.payload).where(
            _among(session, Callback.message_id, message_ids)
        )
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
        select(
            Attempt.id, Attempt.error, Attempt.response_body.is_not(None).label("has_body")
        ).where(_among(session, Attempt.message_id, message_ids))
    ).all()
    changes = []
    for attempt in attempts:
        error = error_facts(attempt.error)
        if error != attempt.error:
            changes.append((attempt.id, {"error": error}))
        elif attempt.has_body:
            changes.append((attempt.id, {}))
    _update_grouped(session, _attempts, changes, response_body=None)


def _purge_events(session: Session, message_ids: Iterable[int]) -> None:
    events = session.execute(
        select(MessageEvent.id, MessageEvent.detail).where(
            _among(session, MessageEvent.message_id, message_ids), MessageEvent.detail.is_not(None)
        )
    ).all()
    changes = []
    for event in events:
        detail = _detail_facts(event.detail)
        if detail != event.detail:
            changes.append((event.id, {"detail": detail}))
    _update_grouped(session, _events, changes)


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
        .where(_among(session, WebhookDelivery.id, ids))
        .values(body="", headers={}, purged_at=now)
        .execution_options(synchronize_session=False)
    )
    statuses = session.execute(
        select(WebhookStatus.id, WebhookStatus.payload).where(
            _among(session, WebhookStatus.delivery_id, ids)
        )
    ).all()
    changes = []
    for status in statuses:
        payload = payload_facts(status.payload or {})
        if payload != status.payload:
            changes.append((status.id, {"payload": payload}))
    _update_grouped(session, _statuses, changes)
    return len(ids)
