"""What Ratchet does with a `message_template_status_update` (called by `app/meta_events.py`
in the delivery's transaction): PAUSED, DISABLED and REJECTED hold the template on its
business account, APPROVED and REINSTATED release it.

Meta may deliver a template's events out of order (a retried PAUSED after the APPROVED
that ended it). Under a lock on the template (business account, name, language), an event
older than the newest one already applied to it (its `entry.time`, else when it came) is
kept with the action "older than the template's newest event; nothing done". The lock also
serializes two holds of one template arriving at once (PAUSED and DISABLED), so the second
updates the first's active hold instead of colliding with it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.providers.base import FailureClass
from app.repo.events import append_event
from app.repo.provider_events import KeptEvent
from app.repo.template_holds import (
    Waiting,
    hold_template,
    lock_template,
    newer_event_applied,
    release_template,
    shared_with_another_tenant,
    waiting_with_template,
)
from app.repo.transitions import apply_status

TEMPLATE_STATUS = "message_template_status_update"
HOLDING = frozenset({"PAUSED", "DISABLED", "REJECTED"})
RELEASING = frozenset({"APPROVED", "REINSTATED"})
OLDER = "older than the template's newest event; nothing done"


@dataclass(slots=True)
class Acted:
    """What the caller does after the commit: ring the drains of released identities."""

    ring: set[tuple[int, str]] = field(default_factory=set)  # (identity id, lane)
    actions: dict[int, str] = field(default_factory=dict)


def act_on_template(
    session: Session, event: KeptEvent, identity_ids: Collection[int], now: datetime, acted: Acted
) -> str:
    """Hold or release the template; only `identity_ids`' messages (the identities whose
    app secret verified the delivery) are noted, failed or rung."""
    change = event.change
    name, language = change.template_name, change.template_language
    if not name or not language:
        return "kept: the event names no template name and language"
    if not _fits(name, 512) or not _fits(language, 20):
        return "kept: the template's name or language is not one Meta gives (NUL or too long)"
    account = change.business_account_id
    lock_template(session, account, name, language)
    if newer_event_applied(session, event.id, TEMPLATE_STATUS, change.provider_time or now):
        return OLDER
    label = f"template {name} ({language})"
    if shared_with_another_tenant(session, account, identity_ids):
        return (
            f"{label} {str(change.event).lower()}: nothing done: business account {account} is "
            "also named by another tenant's identity (give each its own)"
        )
    waiting = waiting_with_template(session, account, name, language, identity_ids)
    if change.event in RELEASING:
        if not release_template(session, account, name, language, now):
            return f"{label} {change.event.lower()}: it was not held"
        for item in waiting:
            _note(session, item, "template_released", event, now)
            acted.ring.add((item.identity_id, item.lane))
        return f"{label} {change.event.lower()}: {len(waiting)} waiting messages due again"
    reason = change.reason.replace("\x00", "\ufffd") if change.reason else None
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
        if change.event == "REJECTED" and not item.leased:
            failed += _fail_rejected(session, item, label, reason, now)
    held = len(waiting) - failed
    words = f"{label} {str(change.event).lower()}"
    if reason:
        words += f" ({reason})"
    if change.event == "REJECTED":
        return f"{words}: {failed} waiting messages failed, {held} others held"
    return f"{words}: {held} waiting messages held until Meta approves it again"


def _fits(value: str, width: int) -> bool:
    return len(value) <= width and "\x00" not in value


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
    """A waiting message of a rejected template ends `failed` (`needs_human`): a queued one
    as a cancel does, a `sending` one waiting for its retry (no lease: no worker holds
    it, and `waiting_with_template` locked its row) as a worker's final failure does. A
    leased one may be in flight, and stays held (its answer decides it)."""
    queued = item.status == Status.QUEUED.value
    result = apply_status(
        session,
        item.message_id,
        Status.FAILED,
        Source.OPERATOR if queued else Source.WORKER,
        now,
        cycle=item.cycle,
        attempt=None if queued else item.attempt,
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
