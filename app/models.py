"""The schema. PostgreSQL holds the truth; SQLite serves the one-command demo.

Migrations in `migrations/` create exactly this (a test compares them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.dbtypes import Base as Base
from app.dbtypes import BigId
from app.models_indexes import MESSAGE_INDEXES
from app.models_operations import AlertEpisode as AlertEpisode
from app.models_operations import AlertPost as AlertPost
from app.models_operations import BulkPlan as BulkPlan
from app.models_operations import BulkPlanItem as BulkPlanItem
from app.models_staff import SignInThrottle as SignInThrottle
from app.models_staff import Staff as Staff
from app.models_tenancy import DEFAULT_RETENTION_DAYS as DEFAULT_RETENTION_DAYS
from app.models_tenancy import Identity as Identity
from app.models_tenancy import Tenant as Tenant
from app.models_webhooks import WebhookDelivery as WebhookDelivery
from app.models_webhooks import WebhookStatus as WebhookStatus
from app.shards import shard_key_of


def _shard_key_of_row(context: Any) -> int:
    """The `shard_key` of a row being inserted, from its `recipient` (Core or ORM)."""
    return shard_key_of(context.get_current_parameters()["recipient"])


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = MESSAGE_INDEXES

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"))
    recipient: Mapped[str] = mapped_column(String(100))
    # A stable hash of the recipient (`app/shards.py`), set at intake from the row's own
    # recipient: which of its lane's shards (drains) sends it. Never changes.
    shard_key: Mapped[int] = mapped_column(
        Integer, default=_shard_key_of_row, server_default=text("0")
    )
    lane: Mapped[str] = mapped_column(String(10))
    body_text: Mapped[str | None] = mapped_column(Text)
    template: Mapped[dict[str, Any] | None]
    template_name: Mapped[str | None] = mapped_column(String(512))  # the template's, to find
    # A caller's label for a send of many (accepted on POST /v1/messages), to find and filter.
    campaign: Mapped[str | None] = mapped_column(String(100))
    # The recipient's last four characters: what the dashboard shows, so what people type.
    recipient_tail: Mapped[str | None] = mapped_column(String(4))
    # Messenger / Instagram: a message tag (HUMAN_AGENT) sends the text as MESSAGE_TAG.
    tag: Mapped[str | None] = mapped_column(String(20))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(10))
    cycle: Mapped[int] = mapped_column(Integer, default=1)
    # The key we send the provider: derived from the message and `provider_key_cycle`,
    # stable across retries; a requeue keeps it when an earlier outcome was unknown.
    provider_key_cycle: Mapped[int] = mapped_column(Integer, default=1)
    correlation_id: Mapped[str | None] = mapped_column(String(64))
    provider_message_id: Mapped[str | None] = mapped_column(String(200))
    # Attempts in this cycle: `attempt` numbers the claims; the class counters feed the caps.
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    unknown_attempts: Mapped[int] = mapped_column(Integer, default=0)
    rate_limited_attempts: Mapped[int] = mapped_column(Integer, default=0)
    had_unknown_outcome: Mapped[bool] = mapped_column(Boolean, default=False)
    request_started_ms: Mapped[int | None] = mapped_column(BigInteger)
    last_attempt_at: Mapped[datetime | None]
    next_attempt_at: Mapped[datetime | None]
    lease_until: Mapped[datetime | None]
    rung_at: Mapped[datetime | None]
    failure_class: Mapped[str | None] = mapped_column(String(20))
    # Set with `failed`: 0 = a person can act on it first (exhausted, template, window...).
    dead_letter_rank: Mapped[int | None] = mapped_column(Integer)
    # A verdict owed after the grace wait (`exhausted` once the last unknown outcome has had
    # its webhook grace): the next claim records it instead of calling the provider.
    pending_verdict: Mapped[str | None] = mapped_column(String(20))
    # Verbatim: provider, http_status, code, subcode, title, message, details, trace_id, raw.
    last_error: Mapped[dict[str, Any] | None]
    queued_at: Mapped[datetime | None]
    not_before: Mapped[datetime | None]  # a `send_at` ahead when accepted: not claimed before
    expires_at: Mapped[datetime | None]  # never called after: then `failed`, class `expired`
    sending_at: Mapped[datetime | None]
    sent_at: Mapped[datetime | None]
    delivered_at: Mapped[datetime | None]
    read_at: Mapped[datetime | None]
    failed_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    # When retention emptied its body, template parameters and the provider's raw answers.
    content_purged_at: Mapped[datetime | None]


class Attempt(Base):
    """One provider call, with its verbatim response."""

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("message_id", "cycle", "number"),
        # Search by a provider id only an earlier attempt knows.
        Index("ix_attempts_provider_message_id", "provider_message_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id"))
    cycle: Mapped[int] = mapped_column(Integer)
    number: Mapped[int] = mapped_column(Integer)
    provider_key: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    outcome: Mapped[str | None] = mapped_column(String(20))
    http_status: Mapped[int | None] = mapped_column(Integer)
    provider_message_id: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[dict[str, Any] | None]
    response_body: Mapped[str | None] = mapped_column(Text)


class MessageEvent(Base):
    """Append-only: every change, applied or refused, with its source and both clocks."""

    __tablename__ = "message_events"
    __table_args__ = (
        Index("ix_message_events_message", "message_id", "id"),
        # GET /v1/messages?updated_since: the messages with a change received since then.
        Index("ix_message_events_received_at", "received_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id"))
    cycle: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(10))
    kind: Mapped[str] = mapped_column(String(20))
    from_status: Mapped[str | None] = mapped_column(String(10))
    to_status: Mapped[str | None] = mapped_column(String(10))
    applied: Mapped[bool] = mapped_column(Boolean)
    refusal: Mapped[str | None] = mapped_column(String(20))
    provider_time: Mapped[datetime | None]
    received_at: Mapped[datetime]
    actor: Mapped[str | None] = mapped_column(String(200))
    detail: Mapped[dict[str, Any] | None]
    # (provider, provider message id, status): the same status seen again adds no event.
    dedupe_key: Mapped[str | None] = mapped_column(String(400), unique=True)


class ConversationWindow(Base):
    """The 24-hour customer-service window a recipient's inbound message opens."""

    __tablename__ = "conversation_windows"
    __table_args__ = (UniqueConstraint("identity_id", "recipient"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"))
    recipient: Mapped[str] = mapped_column(String(100))
    last_inbound_at: Mapped[datetime]
    open_until: Mapped[datetime]


class AuditEntry(Base):
    """Operator actions: who did what, when, and why."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_tenant_target", "tenant_id", "target"),
        # A message's page lists the audit rows that touched it, whatever the tenant scope.
        Index("ix_audit_log_target", "target", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(50))
    target: Mapped[str] = mapped_column(String(100))
    detail: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]
    # The tenant whose data the action touched (None: platform-wide), so a tenant's staff
    # see their own tenant's rows only.
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"))


from app.models_charts import ChartFoldMark as ChartFoldMark  # noqa: E402
from app.models_charts import ChartRollup as ChartRollup  # noqa: E402
from app.models_meta import ProviderEvent as ProviderEvent  # noqa: E402
from app.models_meta import TemplateHold as TemplateHold  # noqa: E402
