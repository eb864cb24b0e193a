"""The status callbacks' tables (docs/callbacks.md): a tenant's endpoints, the outbox of
callbacks, each delivery attempt, and a message's own `status_callback` URL.

Kept out of `app/models.py` (already past the house's size) on the same `Base`; the
migrations' environment imports this module, so the schema test compares these too.

The outbox rows are written by the database itself, in the transaction that changes a
message's status (the trigger of migration 0016): no path that moves a message can forget
them, and the hot paths pay no extra round trip.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.models import Base, BigId

# The states of a callback: waiting to go out (or to be retried), taken by the receiver,
# given up after the retry window.
PENDING, DELIVERED, GAVE_UP = "pending", "delivered", "gave_up"


class CallbackEndpoint(Base):
    """A tenant's receiver. The signing secret is sealed (Fernet, like provider tokens);
    while a roll's overlap lasts the previous secret signs too."""

    __tablename__ = "callback_endpoints"
    __table_args__ = (Index("ix_callback_endpoints_tenant", "tenant_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    url: Mapped[str] = mapped_column(String(2000))
    # Lowercased host of `url`: a message's own `status_callback` must share it.
    host: Mapped[str] = mapped_column(String(255))
    # The event types it receives ("message.delivered", ...).
    events: Mapped[list[str]] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    secret_sealed: Mapped[str] = mapped_column(Text)
    previous_secret_sealed: Mapped[str | None] = mapped_column(Text)
    previous_secret_until: Mapped[datetime | None]
    # Why it stopped: "gone" (it answered 410), "failing" (a run of failures), "by <who>".
    disabled_reason: Mapped[str | None] = mapped_column(String(200))
    disabled_at: Mapped[datetime | None]
    # Attempts that failed in a row since its last 2xx.
    failures_in_row: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Callback(Base):
    """The outbox: one row per applied change and endpoint, posted until the receiver
    answers 2xx or the retry window ends. `sequence` numbers a message's changes and only
    grows (computed under the message's row lock; a message's own URL and an endpoint may
    both carry one change, so it is not unique per endpoint). `webhook-id` is `cb_<id>`,
    kept by every retry and replay, so the receiver deduplicates on it."""

    __tablename__ = "callbacks"
    __table_args__ = (
        # The trigger's "last sequence of this message", and the message page.
        Index("ix_callbacks_message", "message_id", "sequence"),
        # What is due, per endpoint: only the pending rows.
        Index(
            "ix_callbacks_due",
            "endpoint_id",
            "next_attempt_at",
            postgresql_where=text("state = 'pending'"),
            sqlite_where=text("state = 'pending'"),
        ),
        # Retention's oldest finished rows (migration 0021).
        Index(
            "ix_callbacks_done",
            "endpoint_id",
            "created_at",
            postgresql_where=text("state <> 'pending'"),
            sqlite_where=text("state <> 'pending'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(
        ForeignKey("callback_endpoints.id", ondelete="CASCADE")
    )
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id"))
    sequence: Mapped[int] = mapped_column(Integer)
    event: Mapped[str] = mapped_column(String(30))
    payload: Mapped[dict[str, Any]]
    # The message's own `status_callback` (on the endpoint's host), else the endpoint's URL.
    url: Mapped[str | None] = mapped_column(String(2000))
    created_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(String(10), default=PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Also the lease of a claimed row: a worker killed mid-post leaves it due again then.
    next_attempt_at: Mapped[datetime]
    delivered_at: Mapped[datetime | None]
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)


class CallbackAttempt(Base):
    """One POST of a callback: what the receiver answered (its body cut), and how fast."""

    __tablename__ = "callback_attempts"
    __table_args__ = (
        Index("ix_callback_attempts_endpoint", "endpoint_id", "id"),
        Index("ix_callback_attempts_callback", "callback_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    callback_id: Mapped[int] = mapped_column(ForeignKey("callbacks.id", ondelete="CASCADE"))
    endpoint_id: Mapped[int] = mapped_column(
        ForeignKey("callback_endpoints.id", ondelete="CASCADE")
    )
    attempted_at: Mapped[datetime]
    http_status: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[int] = mapped_column(Integer)
    response_body: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)


class MessageCallbackUrl(Base):
    """A message's own `status_callback`, given on `POST /v1/messages` (a side table: the
    messages table is the hot one, and few messages carry one)."""

    __tablename__ = "message_callback_urls"

    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id"), primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(
        ForeignKey("callback_endpoints.id", ondelete="CASCADE")
    )
    url: Mapped[str] = mapped_column(String(2000))


class CallbackSequence(Base):
    """A message's last callback sequence (migration 0021): the trigger counts here under
    the message's row lock, so the count outlives its callbacks rows (an endpoint deleted
    with them, retention's deletes) and a receiver never sees a sequence go back."""

    __tablename__ = "callback_sequences"

    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id"), primary_key=True)
    last: Mapped[int] = mapped_column(Integer)
