"""What Ratchet does with Meta's account-level WhatsApp events (kept by the webhook view in
`provider_events`), in the delivery's transaction. Each event's `action` says what was done.

    message_template_status_update
        PAUSED, DISABLED          the template is held on its business account: waiting
                                  messages that use it (name and language) are not claimed
                                  (a send would fail 132015 / 132016); each gets a timeline
                                  event
        REJECTED                  held too, and its queued messages end `failed`
                                  (`needs_human`) with Meta's reason: nothing will approve
                                  that version
        APPROVED, REINSTATED      the hold is released: its messages are due again
    account_update
        ACCOUNT_RESTRICTION       the account's identities are paused with Meta's words
        DISABLED_UPDATE (DISABLE) the same; lifted (REINSTATE), the operator resumes them
    phone_number_quality_update, message_template_quality_update
                                  shown on the identities page (the newest change)
    anything else               kept and acknowledged; nothing to do

The alerts (`app/repo/alert_templates.py`, and the `paused` alert for a paused identity)
read what this leaves behind, so they fire and clear with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import Identity
from app.providers.base import FailureClass
from app.providers.whatsapp_account import AccountChange
from app.repo.events import append_event
from app.repo.identities import pause_identity
from app.repo.messages import apply_status
from app.repo.provider_events import KeptEvent, note_action
from app.repo.template_holds import (
    Waiting,
    hold_template,
    release_template,
    waiting_with_template,
)

TEMPLATE_STATUS = "message_template_status_update"
HOLDING = frozenset({"PAUSED", "DISABLED", "REJECTED"})
RELEASING = frozenset({"APPROVED", "REINSTATED"})
# Meta's ban states that stop the account sending (a `DISABLED_UPDATE`'s `ban_info`).
BANNED = frozenset({"DISABLE"})
QUALITY_FIELDS = frozenset({"phone_number_quality_update", "message_template_quality_update"})


@dataclass(slots=True)
class Acted:
    """What the caller does after the commit: ring the drains of released identities."""

    ring: set[tuple[int, str]] = field(default_factory=set)  # (identity id, lane)
    actions: dict[int, str] = field(default_factory=dict)


def act_on_events(session: Session, kept: list[KeptEvent], now: datetime) -> Acted:
    acted = Acted()
    for event in kept:
        identities = _identities(session, event.change.business_account_id)
        if not identities:
            action = (
                f"kept: no identity of Ratchet's has business account "
                f"{event.change.business_account_id}"
            )
        else:
            action = _act(session, event, identities, now, acted)
        note_action(session, event.id, action)
        acted.actions[event.id] = action
    return acted


def _identities(session: Session, account: str) -> list[Identity]:
    return list(
        session.scalars(
            select(Identity)
            .where(Identity.provider == "whatsapp", Identity.business_account_id == account)
            .order_by(Identity.id)
        )
    )


def _act(
    session: Session, event: KeptEvent, identities: list[Identity], now: datetime, acted: Acted
) -> str:
    change = event.change
    if change.field == TEMPLATE_STATUS and change.event in HOLDING | RELEASING:
        return _template(session, event, now, acted)
    if change.field == "account_update":
        words = account_words(change)
        if words is not None:
            return _pause(session, identities, words, now)
    if change.field in QUALITY_FIELDS:
        return "shown on the identities page"
    return "kept; nothing for Ratchet to do"


def _template(session: Session, event: KeptEvent, now: datetime, acted: Acted) -> str:
    change = event.change
    name, language = change.template_name, change.template_language
    if not name or not language:
        return "kept: the event names no template name and language"
    account = change.business_account_id
    label = f"template {name} ({language})"
    waiting = waiting_with_template(session, account, name, language)
    if change.event in RELEASING:
        if not release_template(session, account, name, language, now):
            return f"{label} {change.event.lower()}: it was not held"
        for item in waiting:
            _note(session, item, "template_released", event, now)
            acted.ring.add((item.identity_id, item.lane))
        return f"{label} {change.event.lower()}: {len(waiting)} waiting messages due again"
    reason = change.reason
    hold_template(
        session,
        account,
        name,
        language,
        state=str(change.event),
        reason=reason,
        event_id=event.id,
        now=now,
    )
    failed = 0
    for item in waiting:
        _note(session, item, "template_held", event, now)
        if change.event == "REJECTED" and item.status == Status.QUEUED.value:
            failed += _fail_rejected(session, item, label, reason, now)
    held = len(waiting) - failed
    words = f"{label} {str(change.event).lower()}"
    if reason:
        words += f" ({reason})"
    if change.event == "REJECTED":
        return f"{words}: {failed} queued messages failed, {held} others held"
    return f"{words}: {held} waiting messages held until Meta approves it again"


def _note(session: Session, item: Waiting, kind: str, event: KeptEvent, now: datetime) -> None:
    change = event.change
    append_event(
        session,
        message_id=item.message_id,
        cycle=item.cycle,
        source=Source.WEBHOOK.value,
        kind=kind,
        received_at=now,
        applied=False,
        provider_time=change.provider_time,
        detail={
            "provider_event_id": event.id,
            "event": change.event,
            "template": change.template_name,
            "language": change.template_language,
            "reason": change.reason,
        },
        dedupe_key=f"{kind}:{item.message_id}:{item.cycle}:{event.id}",
    )


def _fail_rejected(
    session: Session, item: Waiting, label: str, reason: str | None, now: datetime
) -> int:
    """A queued message of a rejected template ends `failed` (`needs_human`), as a cancel
    does (queued only: a claimed one may be in flight, and stays held)."""
    result = apply_status(
        session,
        item.message_id,
        Status.FAILED,
        Source.OPERATOR,
        now,
        cycle=item.cycle,
        kind="template_rejected",
        actor="meta",
        detail={"reason": reason},
        extra_values={
            "failure_class": FailureClass.NEEDS_HUMAN.value,
            "dead_letter_rank": 0,  # a person acts on it: a new template, or a fixed one
            "next_attempt_at": None,
            "lease_until": None,
            "last_error": {
                "provider": "whatsapp",
                "code": None,
                "title": f"Meta rejected {label}",
                "message": reason or "rejected, no reason given",
            },
        },
    )
    return 1 if result.applied else 0


def account_words(change: AccountChange) -> str | None:
    """Meta's words for an account event that stops the account sending; None for any
    other (a violation warning, a verification, a partner change, a reinstatement)."""
    value: dict[str, Any] = change.value
    if change.event == "ACCOUNT_RESTRICTION":
        kinds = [
            str(item.get("restriction_type"))
            for item in value.get("restriction_info") or []
            if isinstance(item, dict)
        ]
        return "Meta restricted the account: " + (", ".join(kinds) or "no restriction named")
    if change.event == "DISABLED_UPDATE":
        ban = value.get("ban_info")
        ban = ban if isinstance(ban, dict) else {}
        state = str(ban.get("waba_ban_state") or "")
        if state in BANNED:
            when = ban.get("waba_ban_date") or "a date not given"
            return f"Meta disabled the account: {state} on {when}"
    return None


def _pause(session: Session, identities: list[Identity], words: str, now: datetime) -> str:
    paused = [
        identity.id
        for identity in identities
        if pause_identity(session, identity.id, words, now, by="meta")
    ]
    if not paused:
        return f"{words}: its identities were paused already"
    return f"{words}: identities {', '.join(map(str, paused))} paused"
