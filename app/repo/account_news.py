"""What the identities page shows of Meta's account-level events: the number's newest
quality and messaging-limit change, the templates' newest quality changes, and the
templates held now, for each business account."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import ProviderEvent, TemplateHold

NUMBER_QUALITY = "phone_number_quality_update"
TEMPLATE_QUALITY = "message_template_quality_update"
SHOWN = 3  # template quality changes shown per account


@dataclass(frozen=True, slots=True)
class Change:
    event: str | None
    value: dict[str, Any]
    at: datetime  # when Meta said it changed (the entry's time), else when it came
    template: str | None = None


@dataclass(slots=True)
class AccountNews:
    number: Change | None = None
    templates: list[Change] = field(default_factory=list)
    holds: list[TemplateHold] = field(default_factory=list)


def account_news(session: Session, accounts: list[str | None]) -> dict[str, AccountNews]:
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
    return news
