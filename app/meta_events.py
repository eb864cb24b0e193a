"""What Ratchet does with Meta's account-level WhatsApp events (kept by the webhook view in
`provider_events`), in the delivery's transaction. Each event's `action` says what was done.

    message_template_status_update (`app/meta_templates.py`; one older than the template's
    newest applied event does nothing)
        PAUSED, DISABLED          the template is held on its business account: waiting
                                  messages that use it (name and language) are not claimed
                                  (a send would fail 132015 / 132016); each gets a timeline
                                  event
        REJECTED                  held too, and its waiting messages no worker holds end
                                  `failed` (`needs_human`) with Meta's reason: nothing will
                                  approve that version
        APPROVED, REINSTATED      the hold is released: its messages are due again
    account_update
        ACCOUNT_RESTRICTION       customer-initiated messaging restricted: the identities
                                  are paused with Meta's words; business-initiated only:
                                  their campaign lane is paused; anything else (adding a
                                  number, an unknown kind): kept and logged, no pause
        DISABLED_UPDATE (DISABLE) the identities are paused; lifted (REINSTATE), the
                                  operator resumes them

Only the identities whose own app secret verified the delivery (`verified`) are acted on:
naming a business account gives no identity power over another's messages.
    phone_number_quality_update, message_template_quality_update
                                  shown on the identities page (the newest change)
    anything else               kept and acknowledged; nothing to do

The alerts (`app/repo/alert_templates.py`, and the `paused` alert for a paused identity)
read what this leaves behind, so they fire and clear with it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.meta_templates import HOLDING, RELEASING, TEMPLATE_STATUS, Acted, act_on_template
from app.models import Identity
from app.providers.whatsapp_account import AccountChange
from app.repo.identities import pause_identity
from app.repo.provider_events import KeptEvent, note_action
from app.repo.sql import rows_changed

log = logging.getLogger(__name__)

# Meta's ban states that stop the account sending (a `DISABLED_UPDATE`'s `ban_info`).
BANNED = frozenset({"DISABLE"})
QUALITY_FIELDS = frozenset({"phone_number_quality_update", "message_template_quality_update"})
# An ACCOUNT_RESTRICTION's `restriction_type`s (PROVIDERS.md 1.7) and what they stop.
WHOLE = "whole"  # every message: customer-initiated messaging (replies) is restricted
CAMPAIGN = "campaign"  # business-initiated messaging only: the campaign lane
RESTRICTS = {
    "RESTRICTED_CUSTOMER_INITIATED_MESSAGING": WHOLE,
    "RESTRICTED_BIZ_INITIATED_MESSAGING": CAMPAIGN,
}

__all__ = ["Acted", "account_words", "act_on_events"]


def act_on_events(
    session: Session, kept: list[KeptEvent], now: datetime, verified: Collection[int]
) -> Acted:
    """Act on each kept event for the `verified` identities of its business account."""
    acted = Acted()
    for event in kept:
        identities = _identities(session, event.change.business_account_id, verified)
        if not identities:
            action = (
                f"kept: no identity of Ratchet's whose app secret verified it has business "
                f"account {event.change.business_account_id}"
            )
        else:
            action = _act(session, event, identities, now, acted)
        note_action(session, event.id, action)
        acted.actions[event.id] = action
    return acted


def _identities(session: Session, account: str, verified: Collection[int]) -> list[Identity]:
    if not verified or "\x00" in account:
        return []
    return list(
        session.scalars(
            select(Identity)
            .where(
                Identity.provider == "whatsapp",
                Identity.business_account_id == account,
                Identity.id.in_(sorted(verified)),
            )
            .order_by(Identity.id)
        )
    )


def _act(
    session: Session, event: KeptEvent, identities: list[Identity], now: datetime, acted: Acted
) -> str:
    change = event.change
    if change.field == TEMPLATE_STATUS and change.event in HOLDING | RELEASING:
        ids = [identity.id for identity in identities]
        return act_on_template(session, event, ids, now, acted)
    if change.field == "account_update":
        words = account_words(change)
        if words is not None:
            words = words.replace("\x00", "\ufffd")[:1000]  # Meta's words, as stored
            return _pause(session, identities, words, restricted(change), now)
    if change.field in QUALITY_FIELDS:
        return "shown on the identities page"
    return "kept; nothing for Ratchet to do"


def restricted(change: AccountChange) -> str | None:
    """What an account event stops: WHOLE, CAMPAIGN, or None (nothing Ratchet sends)."""
    if change.event == "DISABLED_UPDATE":
        return WHOLE
    kinds = {RESTRICTS.get(kind) for kind in _restriction_kinds(change)}
    if WHOLE in kinds:
        return WHOLE
    return CAMPAIGN if CAMPAIGN in kinds else None


def _restriction_kinds(change: AccountChange) -> list[str]:
    value: dict[str, Any] = change.value
    return [
        str(item.get("restriction_type"))
        for item in value.get("restriction_info") or []
        if isinstance(item, dict)
    ]


def account_words(change: AccountChange) -> str | None:
    """Meta's words for an account event that stops the account sending; None for any
    other (a violation warning, a verification, a partner change, a reinstatement)."""
    value: dict[str, Any] = change.value
    if change.event == "ACCOUNT_RESTRICTION":
        kinds = _restriction_kinds(change)
        return "Meta restricted the account: " + (", ".join(kinds) or "no restriction named")
    if change.event == "DISABLED_UPDATE":
        ban = value.get("ban_info")
        ban = ban if isinstance(ban, dict) else {}
        state = str(ban.get("waba_ban_state") or "")
        if state in BANNED:
            when = ban.get("waba_ban_date") or "a date not given"
            return f"Meta disabled the account: {state} on {when}"
    return None


def _pause(
    session: Session, identities: list[Identity], words: str, scope: str | None, now: datetime
) -> str:
    ids = ", ".join(str(identity.id) for identity in identities)
    if scope is None:
        log.warning("whatsapp account event for identities %s, no pause: %s", ids, words)
        return f"{words}: nothing Ratchet sends is restricted; kept, no identity paused"
    if scope == CAMPAIGN:
        paused = [
            identity.id
            for identity in identities
            if _pause_campaign(session, identity.id, words, now)
        ]
        if not paused:
            return f"{words}: the campaign lanes were paused already"
        return f"{words}: the campaign lane of identities {', '.join(map(str, paused))} paused"
    paused = [
        identity.id
        for identity in identities
        if pause_identity(session, identity.id, words, now, by="meta")
    ]
    if not paused:
        return f"{words}: its identities were paused already"
    which = "identity" if len(paused) == 1 else "identities"
    return f"{words}: {which} {', '.join(map(str, paused))} paused"


def _pause_campaign(session: Session, identity_id: int, words: str, now: datetime) -> bool:
    changed = rows_changed(
        session,
        update(Identity)
        .where(Identity.id == identity_id, Identity.campaign_paused_at.is_(None))
        .values(campaign_paused_at=now, campaign_paused_reason=words, campaign_paused_by="meta"),
    )
    return changed == 1
