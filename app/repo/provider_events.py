"""Meta's account-level events: the identities a business account names, the events kept
verbatim (deduplicated), the business account ids learned, and the events page's query."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Select, Table, exists, select, update
from sqlalchemy.orm import Session, aliased

from app.models import Identity, ProviderEvent, WebhookDelivery
from app.providers.whatsapp_account import AccountChange
from app.repo.routing import ACCOUNT_ID_LENGTH, RoutedIdentity
from app.repo.sql import insert_ignoring_conflict, rows_changed

_identities = cast(Table, Identity.__table__)

# A delivery naming an account no identity has is verified against every WhatsApp app
# secret there is, to keep it if Meta signed it: this many at most (far above one
# installation's apps; past it, such a delivery is refused as unverified).
MAX_SECRETS_TRIED = 1000


def _fits(account_id: str) -> bool:
    return 0 < len(account_id) <= ACCOUNT_ID_LENGTH and "\x00" not in account_id


def _routed(rows: Any) -> list[RoutedIdentity]:
    return [
        RoutedIdentity(row.id, row.account_id, row.app_secret_encrypted, row.business_account_id)
        for row in rows
    ]


def _whatsapp_identities() -> Select[Any]:
    """What routing reads of each WhatsApp identity (`RoutedIdentity`)."""
    return select(
        _identities.c.id,
        _identities.c.account_id,
        _identities.c.app_secret_encrypted,
        _identities.c.business_account_id,
    ).where(_identities.c.provider == "whatsapp")


def identities_of_accounts(
    session: Session | Connection, account_ids: list[str]
) -> list[RoutedIdentity]:
    """The WhatsApp identities of these business accounts, in id order."""
    candidates = [account for account in account_ids if _fits(account)]
    if not candidates:
        return []
    return _routed(
        session.execute(
            _whatsapp_identities()
            .where(
                _identities.c.business_account_id.in_(candidates),
            )
            .order_by(_identities.c.id)
        )
    )


def whatsapp_secret_holders(session: Session | Connection) -> list[RoutedIdentity]:
    """Every WhatsApp identity with an app secret (at most `MAX_SECRETS_TRIED`)."""
    return _routed(
        session.execute(
            _whatsapp_identities()
            .where(
                _identities.c.app_secret_encrypted.is_not(None),
            )
            .order_by(_identities.c.id)
            .limit(MAX_SECRETS_TRIED)
        )
    )


def learn_business_accounts(session: Session, learned: dict[int, str]) -> list[int]:
    """Store each identity's business account where none is known yet (a given one is
    never overwritten by a delivery) and no identity of another tenant holds it (one
    tenant's number never joins another's account); the identities that learned one."""
    other = aliased(Identity)
    done = []
    for identity_id, account in sorted(learned.items()):
        if not _fits(account):
            continue
        changed = rows_changed(
            session,
            update(Identity)
            .where(
                Identity.id == identity_id,
                Identity.business_account_id.is_(None),
                ~exists(
                    select(other.id).where(
                        other.business_account_id == account,
                        other.tenant_id != Identity.tenant_id,
                    )
                ),
            )
            .values(business_account_id=account),
        )
        if changed == 1:
            done.append(identity_id)
    return done


def _storable(value: str | None, width: int) -> Any:
    """What of a signed event's value its column can hold: a NUL (PostgreSQL text cannot
    hold one) becomes U+FFFD, and the value is cut to the column's width. The verbatim
    value stays in the event's `value` and the delivery's body."""
    return value.replace("\x00", "\ufffd")[:width] if value else None


@dataclass(frozen=True, slots=True)
class KeptEvent:
    id: int
    change: AccountChange


def keep_events(
    session: Session, delivery_id: int, changes: list[AccountChange], now: datetime
) -> list[KeptEvent]:
    """Store each change (a redelivered one adds nothing); the new ones, to act on."""
    kept = []
    for change in changes:
        event_id = insert_ignoring_conflict(
            session,
            ProviderEvent.__table__,
            {
                "delivery_id": delivery_id,
                "provider": "whatsapp",
                "business_account_id": _storable(change.business_account_id, ACCOUNT_ID_LENGTH),
                "field": _storable(change.field, 100),
                "event": _storable(change.event, 100),
                "template_name": _storable(change.template_name, 512),
                "template_language": _storable(change.template_language, 20),
                "provider_time": change.provider_time,
                "received_at": now,
                "value": change.value,
                "action": None,
                "dedupe_key": change.dedupe_key,
            },
            ["dedupe_key"],
        )
        if event_id is not None:
            kept.append(KeptEvent(event_id, change))
    return kept


def note_action(session: Session, event_id: int, action: str) -> None:
    action = action.replace("\x00", "\ufffd")  # it may quote a signed value
    session.execute(update(ProviderEvent).where(ProviderEvent.id == event_id).values(action=action))


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    field: str
    event: str | None
    template_name: str | None
    template_language: str | None
    provider_time: datetime | None
    received_at: datetime
    value: dict[str, Any]
    action: str | None
    delivery_id: int
    body: str
    headers: dict[str, Any]


PAGE_SIZE = 50


def events_of_account(
    session: Session, account: str, *, field: str | None = None, limit: int = PAGE_SIZE
) -> list[EventRow]:
    """The account's events, newest first, each with its delivery's verbatim body."""
    query = (
        select(ProviderEvent, WebhookDelivery.body, WebhookDelivery.headers)
        .join(WebhookDelivery, WebhookDelivery.id == ProviderEvent.delivery_id)
        .where(ProviderEvent.business_account_id == account)
        .order_by(ProviderEvent.id.desc())
        .limit(limit)
    )
    if field:
        query = query.where(ProviderEvent.field == field)
    return [
        EventRow(
            event.id,
            event.field,
            event.event,
            event.template_name,
            event.template_language,
            event.provider_time,
            event.received_at,
            event.value,
            event.action,
            event.delivery_id,
            body,
            headers or {},
        )
        for event, body, headers in session.execute(query)
    ]


def fields_of_account(session: Session, account: str) -> list[str]:
    """The kinds of event the account has had, for the page's filter."""
    return list(
        session.scalars(
            select(ProviderEvent.field)
            .where(ProviderEvent.business_account_id == account)
            .distinct()
            .order_by(ProviderEvent.field)
        )
    )


def latest_quality(session: Session, account: str) -> EventRow | None:
    """The account's newest number-quality or messaging-limit change."""
    rows = events_of_account(session, account, field="phone_number_quality_update", limit=1)
    return rows[0] if rows else None


def visible_identity(session: Session, identity_id: int, tenant_id: int | None) -> Identity | None:
    """The identity, if the staff member's tenant scope may see it (read only)."""
    query = select(Identity).where(Identity.id == identity_id)
    if tenant_id is not None:
        query = query.where(Identity.tenant_id == tenant_id)
    return session.scalars(query).one_or_none()
