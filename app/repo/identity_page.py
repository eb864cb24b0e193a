"""The identities page's questions: each sender's settings, pauses, open windows and what
waits on each lane. Secrets are never read here, only when they were set."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import ConversationWindow, Identity, Message, Tenant
from app.repo.account_news import AccountNews, account_news


class IdentityNotFoundError(LookupError):
    """No such identity within the staff member's tenant scope."""


@dataclass(slots=True)
class IdentityRow:
    id: int
    tenant_id: int
    tenant_name: str
    provider: str
    account_id: str
    sender: str | None
    base_url: str
    reply_rate: float
    campaign_rate: float
    total_rate: float
    paused_at: datetime | None
    paused_reason: str | None
    paused_by: str | None
    campaign_paused_at: datetime | None
    campaign_paused_reason: str | None
    campaign_paused_by: str | None
    token_set_at: datetime | None
    has_app_secret: bool
    app_secret_set_at: datetime | None
    credentials_version: int
    business_account_id: str | None = None
    # Seconds each lane's messages may still be sent when the request gives no validity.
    valid_for: dict[str, int | None] = field(default_factory=dict)
    open_windows: int = 0
    waiting: dict[str, int] = field(default_factory=lambda: {"reply": 0, "campaign": 0})
    # Meta's account-level news (`app/repo/account_news.py`), for WhatsApp identities.
    news: AccountNews | None = None


def _row(identity: Identity, tenant_name: str) -> IdentityRow:
    return IdentityRow(
        id=identity.id,
        tenant_id=identity.tenant_id,
        tenant_name=tenant_name,
        provider=identity.provider,
        account_id=identity.account_id,
        sender=identity.sender,
        base_url=identity.base_url,
        reply_rate=identity.reply_rate,
        campaign_rate=identity.campaign_rate,
        total_rate=identity.total_rate,
        paused_at=identity.paused_at,
        paused_reason=identity.paused_reason,
        paused_by=identity.paused_by,
        campaign_paused_at=identity.campaign_paused_at,
        campaign_paused_reason=identity.campaign_paused_reason,
        campaign_paused_by=identity.campaign_paused_by,
        # Made before the column existed: the creation is the last time it was set.
        token_set_at=identity.token_set_at or identity.created_at,
        has_app_secret=identity.app_secret_encrypted is not None,
        app_secret_set_at=identity.app_secret_set_at
        or (identity.created_at if identity.app_secret_encrypted else None),
        credentials_version=identity.credentials_version,
        business_account_id=identity.business_account_id,
        valid_for={"reply": identity.reply_valid_for, "campaign": identity.campaign_valid_for},
    )


def identity_rows(session: Session, tenant_id: int | None, now: datetime) -> list[IdentityRow]:
    """Every identity the scope may see, with its open windows and waiting messages (both
    from indexes: the windows' unique key and the partial index of waiting messages)."""
    query = (
        select(Identity, Tenant.name)
        .join(Tenant, Tenant.id == Identity.tenant_id)
        .order_by(Tenant.name, Identity.id)
    )
    if tenant_id is not None:
        query = query.where(Identity.tenant_id == tenant_id)
    rows = {identity.id: _row(identity, name) for identity, name in session.execute(query)}
    if not rows:
        return []
    ids = list(rows)
    windows = (
        select(ConversationWindow.identity_id, func.count())
        .where(ConversationWindow.identity_id.in_(ids), ConversationWindow.open_until > now)
        .group_by(ConversationWindow.identity_id)
    )
    for identity_id, count in session.execute(windows):
        rows[identity_id].open_windows = int(count)
    waiting = (
        select(Message.identity_id, Message.lane, func.count())
        .where(
            Message.identity_id.in_(ids),
            Message.status.in_([Status.QUEUED.value, Status.SENDING.value]),
        )
        .group_by(Message.identity_id, Message.lane)
    )
    for identity_id, lane, count in session.execute(waiting):
        rows[identity_id].waiting[lane] = int(count)
    news = account_news(session, [r.business_account_id for r in rows.values()], now)
    for row in rows.values():
        row.news = news.get(row.business_account_id or "")
    return list(rows.values())


def scoped_identity(session: Session, identity_id: int, tenant_id: int | None) -> Identity:
    """The identity, locked for the action about to change it, if the scope may see it.

    `FOR NO KEY UPDATE` (no action changes a key of it): it excludes other writers and the
    claim's share lock, and lets through the key-share lock each message written for the
    identity takes, so the API's intake and the operator wait on neither side."""
    query = select(Identity).where(Identity.id == identity_id).with_for_update(key_share=True)
    if tenant_id is not None:
        query = query.where(Identity.tenant_id == tenant_id)
    identity = session.scalars(query.execution_options(populate_existing=True)).one_or_none()
    if identity is None:
        raise IdentityNotFoundError(identity_id)
    return identity
