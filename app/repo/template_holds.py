"""Template holds: a template Meta paused, disabled or rejected on a business account keeps
the waiting messages that use it (name and language) from being claimed, so none is sent
into a certain 132015 / 132016 / 132001 failure; approved or reinstated, they go again.

The claims read one predicate from here (`not_template_held`), nothing else: the hold is a
row, and a message it covers is simply not claimable while the row is active. A message
already claimed (in flight) is not stopped; its answer decides it as ever.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exists, func, select, update
from sqlalchemy.orm import Session, aliased

from app.lifecycle import Source, Status
from app.models import Identity, Message, ProviderEvent, TemplateHold
from app.repo.events import append_event
from app.repo.sql import rows_changed


def _name(row: Any) -> Any:
    return row.template["name"].as_string()


def _language(row: Any) -> Any:
    return row.template["language"].as_string()


def not_template_held(identity_id: int | None = None, row: Any = Message) -> Any:
    """The claim's condition: the message uses no template held on its identity's
    business account. (A message without a template, or an identity whose business account
    is unknown, is never held.) With `identity_id` (a drain's claim: one identity), its
    business account is read once for the statement, and each candidate row costs one probe
    of the active holds' index, empty almost always; without it, the message's own identity
    is looked up (a single message's claim). `row`: the messages table or an alias of it
    (the earlier messages of a conversation, `app/repo/conversations.py`)."""
    if identity_id is not None:
        account: Any = (
            select(Identity.business_account_id).where(Identity.id == identity_id).scalar_subquery()
        )
    else:
        account = (
            select(Identity.business_account_id)
            .where(Identity.id == row.identity_id)
            .correlate_except(Identity)
            .scalar_subquery()
        )
    return ~exists(
        select(TemplateHold.id)
        .where(
            TemplateHold.business_account_id == account,
            TemplateHold.released_at.is_(None),
            TemplateHold.template_name == _name(row),
            TemplateHold.template_language == _language(row),
        )
        .correlate_except(TemplateHold)
    )


def hold_template(
    session: Session,
    account: str,
    name: str,
    language: str,
    *,
    state: str,
    reason: str | None,
    event_id: int,
    now: datetime,
) -> bool:
    """Hold the template (or update the active hold's state: a pause that became a
    disable); True when it was not held before."""
    changed = rows_changed(
        session,
        update(TemplateHold)
        .where(
            TemplateHold.business_account_id == account,
            TemplateHold.template_name == name,
            TemplateHold.template_language == language,
            TemplateHold.released_at.is_(None),
        )
        .values(state=state, reason=reason, event_id=event_id),
    )
    if changed:
        return False
    session.add(
        TemplateHold(
            business_account_id=account,
            template_name=name,
            template_language=language,
            state=state,
            reason=reason,
            event_id=event_id,
            held_at=now,
        )
    )
    session.flush()
    return True


def release_template(
    session: Session, account: str, name: str, language: str, now: datetime
) -> bool:
    """Release the active hold, if any; True when there was one."""
    return (
        rows_changed(
            session,
            update(TemplateHold)
            .where(
                TemplateHold.business_account_id == account,
                TemplateHold.template_name == name,
                TemplateHold.template_language == language,
                TemplateHold.released_at.is_(None),
            )
            .values(released_at=now),
        )
        > 0
    )


@dataclass(frozen=True, slots=True)
class Waiting:
    message_id: int
    cycle: int
    status: str
    identity_id: int
    lane: str
    attempt: int
    leased: bool  # claimed by a worker now (its lease has not run out): maybe in flight


def waiting_with_template(
    session: Session, account: str, name: str, language: str, identity_ids: Collection[int]
) -> list[Waiting]:
    """The waiting messages (queued, or sending and not yet sent) of these identities of
    the account that use this template, oldest first; their rows locked, so a worker
    cannot claim one while the event acts on it."""
    if not identity_ids:
        return []
    now = func.now()
    rows = session.execute(
        select(
            Message.id,
            Message.cycle,
            Message.status,
            Message.identity_id,
            Message.lane,
            Message.attempt,
            (Message.status == Status.SENDING.value)
            & Message.lease_until.is_not(None)
            & (Message.lease_until > now),
        )
        .join(Identity, Identity.id == Message.identity_id)
        .where(
            Identity.business_account_id == account,
            Message.identity_id.in_(sorted(identity_ids)),
            Message.status.in_([Status.QUEUED.value, Status.SENDING.value]),
            _name(Message) == name,
            _language(Message) == language,
        )
        .order_by(Message.id)
        .with_for_update(of=Message, key_share=True)
    )
    return [Waiting(*row) for row in rows]


def lock_template(session: Session, account: str, name: str, language: str) -> None:
    """Take the template's lock until the transaction ends (PostgreSQL's advisory lock on
    the three values): its events are applied one at a time."""
    if session.get_bind().dialect.name != "postgresql":
        return
    key = f"template:{account}:{name}:{language}"
    session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(key, 0))))


def newer_event_applied(session: Session, event_id: int, field: str, when: datetime) -> bool:
    """Whether another event of this template (`event_id`'s account, name and language;
    taken under `lock_template`) newer than `when` was applied already: `when` is the
    event's `entry.time`, else the time it came, and so is theirs."""
    this = aliased(ProviderEvent)
    newest = session.scalar(
        select(func.max(func.coalesce(ProviderEvent.provider_time, ProviderEvent.received_at)))
        .join(
            this,
            (this.business_account_id == ProviderEvent.business_account_id)
            & (this.template_name == ProviderEvent.template_name)
            & (this.template_language == ProviderEvent.template_language),
        )
        .where(
            this.id == event_id,
            ProviderEvent.id != event_id,
            ProviderEvent.field == field,
            ProviderEvent.action.is_not(None),
        )
    )
    return newest is not None and newest > when


def active_holds(session: Session, accounts: list[str]) -> list[TemplateHold]:
    """The active holds on these business accounts (the identities page, the alerts)."""
    if not accounts:
        return []
    return list(
        session.scalars(
            select(TemplateHold)
            .where(
                TemplateHold.business_account_id.in_(accounts),
                TemplateHold.released_at.is_(None),
            )
            .order_by(TemplateHold.id)
        )
    )


def note_if_held(session: Session, message: Message, now: datetime) -> TemplateHold | None:
    """A new message whose template is held on its identity's business account gets a
    `template_held` timeline event at once (a rejected template's never ends otherwise:
    its timeline says why it waits); the hold, or None."""
    template = message.template or {}
    name, language = template.get("name"), template.get("language")
    if not isinstance(name, str) or not isinstance(language, str):
        return None
    hold = session.scalars(
        select(TemplateHold).where(
            TemplateHold.business_account_id
            == select(Identity.business_account_id)
            .where(Identity.id == message.identity_id)
            .scalar_subquery(),
            TemplateHold.template_name == name,
            TemplateHold.template_language == language,
            TemplateHold.released_at.is_(None),
        )
    ).first()
    if hold is None:
        return None
    append_event(
        session,
        message_id=message.id,
        cycle=message.cycle,
        source=Source.WEBHOOK.value,
        kind="template_held",
        received_at=now,
        applied=False,
        detail={
            "provider_event_id": hold.event_id,
            "event": hold.state,
            "template": name,
            "language": language,
            "reason": hold.reason,
        },
        dedupe_key=f"template_held:{message.id}:{message.cycle}:{hold.event_id}",
    )
    return hold


def shared_with_another_tenant(
    session: Session, account: str, identity_ids: Collection[int]
) -> bool:
    """Whether an identity of a tenant none of `identity_ids` belongs to names this business
    account too (stored before an account was tied to one tenant): a hold on the account
    would stop that tenant's messages on another's word."""
    tenants = select(Identity.tenant_id).where(Identity.id.in_(sorted(identity_ids)))
    other = session.scalar(
        select(Identity.id)
        .where(Identity.business_account_id == account, Identity.tenant_id.not_in(tenants))
        .limit(1)
    )
    return other is not None
