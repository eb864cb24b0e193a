"""Meta's account-level events (WhatsApp account, template and number-quality webhooks) and
the template holds they put on waiting messages. On `app/models.py`'s metadata."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.dbtypes import Base, BigId


class ProviderEvent(Base):
    """One change of an account-level delivery (`entry[].changes[]`), kept verbatim with
    what Ratchet did about it. The delivery it came in is in `webhook_deliveries`."""

    __tablename__ = "provider_events"
    __table_args__ = (
        # An account's events, newest first (the identity's events page).
        Index("ix_provider_events_account", "business_account_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(ForeignKey("webhook_deliveries.id"))
    provider: Mapped[str] = mapped_column(String(20))
    business_account_id: Mapped[str] = mapped_column(String(100))
    # The subscription field (`account_update`, `message_template_status_update`, ...) and
    # the event word in it (`PAUSED`, `ACCOUNT_RESTRICTION`, `YELLOW`, ...).
    field: Mapped[str] = mapped_column(String(100))
    event: Mapped[str | None] = mapped_column(String(100))
    template_name: Mapped[str | None] = mapped_column(String(512))
    template_language: Mapped[str | None] = mapped_column(String(20))
    provider_time: Mapped[datetime | None]
    received_at: Mapped[datetime]
    value: Mapped[dict[str, Any]]
    # What Ratchet did about it, in a support person's words.
    action: Mapped[str | None] = mapped_column(Text)
    # A redelivery of the same change adds nothing.
    dedupe_key: Mapped[str] = mapped_column(String(64), unique=True)


class TemplateHold(Base):
    """A template Meta paused, disabled or rejected on a business account: waiting messages
    that use it (name and language) are not claimed until Meta approves it again."""

    __tablename__ = "template_holds"
    __table_args__ = (
        Index(
            "uq_template_holds_active",
            "business_account_id",
            "template_name",
            "template_language",
            unique=True,
            postgresql_where=text("released_at IS NULL"),
            sqlite_where=text("released_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    business_account_id: Mapped[str] = mapped_column(String(100))
    template_name: Mapped[str] = mapped_column(String(512))
    template_language: Mapped[str] = mapped_column(String(20))
    state: Mapped[str] = mapped_column(String(30))  # Meta's word: PAUSED, DISABLED, REJECTED
    reason: Mapped[str | None] = mapped_column(Text)
    event_id: Mapped[int] = mapped_column(ForeignKey("provider_events.id"))
    held_at: Mapped[datetime]
    released_at: Mapped[datetime | None]
