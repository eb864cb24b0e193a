"""Template holds: a template Meta paused, disabled or rejected on a business account keeps
the waiting messages that use it (name and language) from being claimed, so none is sent
into a certain 132015 / 132016 / 132001 failure; approved or reinstated, they go again.

The claims read one predicate from here (`not_template_held`), nothing else: the hold is a
row, and a message it covers is simply not claimable while the row is active. A message
already claimed (in flight) is not stopped; its answer decides it as ever.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Identity, Message, TemplateHold
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


def waiting_with_template(
    session: Session, account: str, name: str, language: str
) -> list[Waiting]:
    """The waiting messages (queued, or sending and not yet sent) of the account's
    identities that use this template, oldest first."""
    rows = session.execute(
        select(Message.id, Message.cycle, Message.status, Message.identity_id, Message.lane)
        .join(Identity, Identity.id == Message.identity_id)
        .where(
            Identity.business_account_id == account,
            Message.status.in_([Status.QUEUED.value, Status.SENDING.value]),
            _name(Message) == name,
            _language(Message) == language,
        )
        .order_by(Message.id)
    )
    return [Waiting(*row) for row in rows]


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
