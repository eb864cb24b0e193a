"""The providers' webhook deliveries, kept verbatim, and the statuses read from them. On
`app/models.py`'s metadata, which re-exports them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.dbtypes import Base, BigId


class WebhookDelivery(Base):
    """A provider's raw delivery, committed before anything is applied."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index(
            "ix_webhook_deliveries_unpurged",
            "identity_id",
            "received_at",
            postgresql_where=text("purged_at IS NULL"),
            sqlite_where=text("purged_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    provider: Mapped[str] = mapped_column(String(20))
    identity_id: Mapped[int | None] = mapped_column(ForeignKey("identities.id"))
    headers: Mapped[dict[str, Any]]
    body: Mapped[str] = mapped_column(Text)
    received_at: Mapped[datetime]
    # Retention emptied `headers` and `body` (and its statuses' payloads) at this time.
    purged_at: Mapped[datetime | None]


class WebhookStatus(Base):
    """One status from a delivery; unapplied ones are replayed by the sweeper.

    `dedupe_key` (provider, provider message id, status) makes a duplicate add nothing.
    """

    __tablename__ = "webhook_statuses"
    __table_args__ = (
        # Only the statuses still to apply (the sweeper's replay, the expiry of parked
        # ones, a hold's check): an applied status leaves it, and applying one adds nothing.
        Index(
            "ix_webhook_statuses_pending",
            "received_at",
            postgresql_where=text("applied_at IS NULL"),
            sqlite_where=text("applied_at IS NULL"),
        ),
        Index("ix_webhook_statuses_provider_message_id", "provider", "provider_message_id"),
        # A message's page lists the statuses that named it.
        Index("ix_webhook_statuses_message_id", "message_id"),
        # Retention purges a delivery's statuses with it (and checks none is still pending).
        Index("ix_webhook_statuses_delivery_id", "delivery_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(ForeignKey("webhook_deliveries.id"))
    provider: Mapped[str] = mapped_column(String(20))
    # Null for a status naming a number we do not know, in a delivery that verified: kept
    # verbatim and unmatched (refusing the batch would make Meta resend it for ever).
    identity_id: Mapped[int | None] = mapped_column(ForeignKey("identities.id"))
    # The routing id the status came under (WhatsApp: phone_number_id).
    routing_id: Mapped[str | None] = mapped_column(String(100))
    dedupe_key: Mapped[str] = mapped_column(String(400), unique=True)
    provider_message_id: Mapped[str | None] = mapped_column(String(200))
    correlation_id: Mapped[str | None] = mapped_column(String(512))
    status: Mapped[str] = mapped_column(String(20))
    provider_time: Mapped[datetime | None]
    received_at: Mapped[datetime]
    payload: Mapped[dict[str, Any]]
    # Null until it was applied or refused; `parked` while no message matches yet.
    applied_at: Mapped[datetime | None]
    result: Mapped[str | None] = mapped_column(String(20))
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id"))
    tries: Mapped[int] = mapped_column(Integer, default=0)
