"""What holds a send of many together: its template's name, the caller's campaign label,
and its idempotency keys' common beginning. One filter for the dead letters, search, cancel
and bulk requeue, each an indexed column (`ix_messages_template_name`,
`ix_messages_campaign`, and the key's `text_pattern_ops` index)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from app.models import Message

Q = TypeVar("Q")
# The form fields, as the pages and the bulk plans name them.
FIELDS = ("template", "campaign", "key_prefix")


@dataclass(frozen=True, slots=True)
class CampaignFilter:
    template: str | None = None
    campaign: str | None = None
    key_prefix: str | None = None

    def apply(self, query: Any) -> Any:
        if self.template:
            query = query.where(Message.template_name == self.template)
        if self.campaign:
            query = query.where(Message.campaign == self.campaign)
        if self.key_prefix:
            query = query.where(
                Message.idempotency_key.startswith(self.key_prefix, autoescape=True)
            )
        return query

    def described(self) -> dict[str, str]:
        """The filters given, as a plan's page shows them."""
        return {name: value for name in FIELDS if (value := getattr(self, name))}


def campaign_filter(values: Mapping[str, str]) -> CampaignFilter:
    """From a form or a query string: trimmed, cut to the columns' lengths, empty as none."""

    def field(name: str, longest: int) -> str | None:
        value = (values.get(name) or "").strip()[:longest]
        return value if value and "\x00" not in value else None

    return CampaignFilter(
        template=field("template", 512),
        campaign=field("campaign", 100),
        key_prefix=field("key_prefix", 255),
    )
