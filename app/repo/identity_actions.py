"""What a person does to a sending identity, from the CLI or the dashboard: pause, resume
(the whole identity or its campaign lane only) and change its rates or credentials.

Each action is one call inside the caller's transaction: the check, the change and its
audit row commit together. The caller rings the drains only after the commit (a ring
before it could find nothing due and go back to sleep).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.crypto import SecretBox
from app.lifecycle import Status
from app.models import Identity, Message
from app.repo import identities
from app.repo.give_back import release_held
from app.repo.sql import rows_changed
from app.repo.staff import record_audit

WHOLE = "identity"
CAMPAIGN = "campaign"
SCOPES = (WHOLE, CAMPAIGN)
MAX_REASON = 500


class IdentityActionError(ValueError):
    """The action cannot be done as asked; the message says why, and nothing changed."""


@dataclass(frozen=True, slots=True)
class Paused:
    done: bool  # False: it was already paused (the first reason stays)
    scope: str
    holds: int  # messages waiting behind the pause


@dataclass(frozen=True, slots=True)
class Resumed:
    done: bool  # False: it was not paused
    scope: str
    # The lanes whose drains to ring after the commit.
    lanes: list[str] = field(default_factory=list)
    released: int = 0  # messages a broken sender held, due again now
    due_now: int = 0  # everything waiting on those lanes


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise IdentityActionError(f"unknown pause scope {scope!r}; expected one of {SCOPES}")


def waiting_count(session: Session, identity_id: int, lane: str | None = None) -> int:
    """Messages queued or sending on this identity (and lane): what a pause holds."""
    query = select(func.count()).where(
        Message.identity_id == identity_id,
        Message.status.in_([Status.QUEUED.value, Status.SENDING.value]),
    )
    if lane is not None:
        query = query.where(Message.lane == lane)
    return int(session.scalar(query) or 0)


def pause(
    session: Session,
    identity: Identity,
    *,
    scope: str,
    reason: str,
    actor: str,
    now: datetime,
    via: str,
) -> Paused:
    """Pause the whole identity, or its campaign lane only (replies go on)."""
    _check_scope(scope)
    reason = reason.strip()
    if not reason:
        raise IdentityActionError("say why it is paused: the person who resumes it reads it")
    if len(reason) > MAX_REASON:
        raise IdentityActionError(f"the reason is over {MAX_REASON} characters; shorten it")
    if scope == WHOLE:
        done = identities.pause_identity(session, identity.id, reason, now, by=actor)
        holds = waiting_count(session, identity.id) if done else 0
    else:
        done = (
            rows_changed(
                session,
                update(Identity)
                .where(Identity.id == identity.id, Identity.campaign_paused_at.is_(None))
                .values(
                    campaign_paused_at=now, campaign_paused_reason=reason, campaign_paused_by=actor
                ),
            )
            == 1
        )
        holds = waiting_count(session, identity.id, CAMPAIGN) if done else 0
    if done:
        record_audit(
            session,
            actor,
            "identity.pause" if scope == WHOLE else "identity.pause_campaign",
            f"identity:{identity.id}",
            now,
            {"reason": reason, "scope": scope, "holds": holds, "via": via},
            tenant_id=identity.tenant_id,
        )
    return Paused(done, scope, holds)


def resume(
    session: Session, identity: Identity, *, scope: str, actor: str, now: datetime, via: str
) -> Resumed:
    """Resume the whole identity (the messages a broken sender held are due at once), or
    its campaign lane. Ring the returned lanes after the commit."""
    _check_scope(scope)
    if scope == WHOLE:
        if not identities.resume_identity(session, identity.id, now):
            return Resumed(False, scope)
        released = len(release_held(session, identity.id, now))
        lanes = ["reply", "campaign"]
    else:
        # A campaign pause holds nothing in `sending`: its messages stay queued or wait
        # for their retry time, and are due the moment the lane is active again.
        changed = rows_changed(
            session,
            update(Identity)
            .where(Identity.id == identity.id, Identity.campaign_paused_at.is_not(None))
            .values(campaign_paused_at=None, campaign_paused_reason=None, campaign_paused_by=None),
        )
        if changed != 1:
            return Resumed(False, scope)
        released = 0
        lanes = [CAMPAIGN]
    # Everything waiting is due again (queued, held, retries): ring each lane's drain once.
    due_now = sum(waiting_count(session, identity.id, lane) for lane in lanes)
    record_audit(
        session,
        actor,
        "identity.resume" if scope == WHOLE else "identity.resume_campaign",
        f"identity:{identity.id}",
        now,
        {"scope": scope, "released": released, "due_now": due_now, "via": via},
        tenant_id=identity.tenant_id,
    )
    return Resumed(True, scope, lanes, released, due_now)


def change(
    session: Session,
    box: SecretBox,
    identity: Identity,
    *,
    actor: str,
    now: datetime,
    via: str,
    token: str | None = None,
    app_secret: str | None = None,
    base_url: str | None = None,
    verify_token: str | None = None,
    reply_rate: float | None = None,
    campaign_rate: float | None = None,
    total_rate: float | None = None,
    business_account_id: str | None = None,
) -> list[str]:
    """Change what was given (a new token bumps the credentials version); the audit row
    names the fields changed, never a secret's value. Raises `RatesError` on bad rates,
    `BaseUrlError` on a base URL no call can go to (`checked_base_url`), `TokenError` on a
    token no call can carry (`checked_token`)."""
    changed = identities.update_identity(
        session,
        box,
        identity.id,
        token=token,
        app_secret=app_secret,
        base_url=base_url,
        verify_token=verify_token,
        reply_rate=reply_rate,
        campaign_rate=campaign_rate,
        total_rate=total_rate,
        business_account_id=business_account_id,
        now=now,
    )
    if changed:
        detail: dict[str, object] = {"changed": changed, "via": via}
        rates = {
            name: value
            for name, value in (
                ("reply_rate", reply_rate),
                ("campaign_rate", campaign_rate),
                ("total_rate", total_rate),
            )
            if value is not None
        }
        if rates:
            detail["rates"] = rates
        record_audit(
            session,
            actor,
            "identity.update",
            f"identity:{identity.id}",
            now,
            detail,
            tenant_id=identity.tenant_id,
        )
    return changed
