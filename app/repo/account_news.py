"""What the identities page shows of Meta's account-level events: the number's newest
quality and messaging-limit change, the templates' newest quality changes, and the
templates held now, for each business account."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, union
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Identity, Message, ProviderEvent, TemplateHold

NUMBER_QUALITY = "phone_number_quality_update"
TEMPLATE_QUALITY = "message_template_quality_update"
SHOWN = 3  # template quality changes shown per account
DAY = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class Change:
    event: str | None
    value: dict[str, Any]
    at: datetime  # when Meta said it changed (the entry's time), else when it came
    template: str | None = None


# Meta's messaging-limit tiers: unique customers a business may start conversations with
# in a rolling 24 hours (PROVIDERS.md 1.7; None: no limit).
TIERS: dict[str, int | None] = {
    "TIER_50": 50,
    "TIER_250": 250,
    "TIER_1K": 1_000,
    "TIER_2K": 2_000,
    "TIER_10K": 10_000,
    "TIER_100K": 100_000,
    "TIER_UNLIMITED": None,
}


@dataclass(slots=True)
class AccountNews:
    number: Change | None = None
    templates: list[Change] = field(default_factory=list)
    holds: list[TemplateHold] = field(default_factory=list)
    # The campaign lane's unique recipients sent to in the last 24 hours or still waiting,
    # over the account's identities, where the number's messaging limit is known.
    reach: int | None = None

    @property
    def limit(self) -> int | None:
        if self.number is None:
            return None
        value = self.number.value
        tier = TIERS.get(str(value.get("current_limit")))
        if tier is None and isinstance(value.get("max_daily_conversations_per_business"), int):
            return int(value["max_daily_conversations_per_business"])
        return tier

    @property
    def over_limit(self) -> bool:
        """The waiting campaign would pass the messaging limit: flagged before it is sent."""
        return self.limit is not None and self.reach is not None and self.reach > self.limit


def account_news(
    session: Session, accounts: list[str | None], now: datetime
) -> dict[str, AccountNews]:
    wanted = sorted({account for account in accounts if account})
    if not wanted:
        return {}
    news = {account: AccountNews() for account in wanted}
    events = session.scalars(
        select(ProviderEvent)
        .where(
            ProviderEvent.business_account_id.in_(wanted),
            ProviderEvent.field.in_([NUMBER_QUALITY, TEMPLATE_QUALITY]),
        )
        .order_by(ProviderEvent.id.desc())
        .limit(200)
    )
    for event in events:
        item = news[event.business_account_id]
        change = Change(
            event.event,
            event.value,
            event.provider_time or event.received_at,
            f"{event.template_name} ({event.template_language})" if event.template_name else None,
        )
        if event.field == NUMBER_QUALITY and item.number is None:
            item.number = change
        elif event.field == TEMPLATE_QUALITY and len(item.templates) < SHOWN:
            item.templates.append(change)
    holds = session.scalars(
        select(TemplateHold)
        .where(TemplateHold.business_account_id.in_(wanted), TemplateHold.released_at.is_(None))
        .order_by(TemplateHold.id)
    )
    for hold in holds:
        news[hold.business_account_id].holds.append(hold)
    limited = [account for account, item in news.items() if item.limit is not None]
    reach = campaign_reach(session, limited, now)
    for account in limited:
        news[account].reach = reach.get(account, 0)
    return news


def campaign_reach(session: Session, accounts: list[str], now: datetime) -> dict[str, int]:
    """{business account: unique campaign recipients sent to in the last 24 hours or still
    waiting}, read through the sends' and the waiting rows' indexes."""
    if not accounts:
        return {}
    ids = select(Identity.id).where(Identity.business_account_id.in_(accounts))
    lane = (Message.identity_id.in_(ids), Message.lane == "campaign")
    recent = select(Message.identity_id, Message.recipient).where(
        *lane, Message.sent_at >= now - DAY
    )
    waiting = select(Message.identity_id, Message.recipient).where(
        *lane, Message.status.in_([Status.QUEUED.value, Status.SENDING.value])
    )
    both = union(recent, waiting).subquery()
    rows = session.execute(
        select(Identity.business_account_id, func.count(func.distinct(both.c.recipient)))
        .join(Identity, Identity.id == both.c.identity_id)
        .group_by(Identity.business_account_id)
    )
    return {str(account): int(count) for account, count in rows}
