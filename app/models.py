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
    column,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.dbtypes import Base as Base
from app.dbtypes import BigId
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


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        # Idempotency is the index, never check-then-insert.
        Index(
            "uq_messages_tenant_idempotency_key",
            "tenant_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
            sqlite_where=text("idempotency_key IS NOT NULL"),
        ),
        # The queue's questions: due work and its oldest age, per identity and lane.
        Index("ix_messages_due", "identity_id", "lane", "status", "next_attempt_at"),
        Index("ix_messages_queued_age", "identity_id", "lane", "status", "queued_at"),
        Index("ix_messages_provider_message_id", "provider_message_id"),
        Index("ix_messages_correlation_id", "correlation_id", unique=True),
        Index("ix_messages_status_failed_at", "status", "failed_at"),
        # Dead letters, actionable first: the rank is a value in SQL, set when it fails.
        Index("ix_messages_dead_letters", "status", "dead_letter_rank", "failed_at", "id"),
        Index("ix_messages_thread", "identity_id", "recipient", "request_started_ms"),
        # The stuck-queue alert's "no progress": the last claim per identity and lane.
        Index("ix_messages_last_claim", "identity_id", "lane", "last_attempt_at"),
        # The delivered-rate and dwell alerts: sends per identity over time.
        Index("ix_messages_identity_sent_at", "identity_id", "sent_at"),
        Index("ix_messages_identity_queued_at", "identity_id", "queued_at"),  # chart arrivals
        # The dashboard's pages, which must not scan the table (issue 14 part 7), and the
        # drains' claims. Partial on the few rows still waiting, so their size follows the
        # backlog, not the history. Its last key is the claim's order, `id + 0` (`CLAIM_ORDER`
        # in app/repo/claims.py): only this index gives that order, so the planner can never walk
        # the primary key from the table's first row instead.
        Index(
            "ix_messages_waiting",
            "identity_id",
            "lane",
            text("(id + 0)"),
            postgresql_where=text("status IN ('queued', 'sending')"),
            sqlite_where=text("status IN ('queued', 'sending')"),
        ),
        # The claim's conversation order: an earlier waiting message to the same recipient.
        Index(
            "ix_messages_conversation",
            "identity_id",
            "lane",
            "recipient",
            "id",
            postgresql_where=text("status IN ('queued', 'sending')"),
            sqlite_where=text("status IN ('queued', 'sending')"),
        ),
        # A drain's last question, when nothing is due: when its next lease expires.
        Index(
            "ix_messages_leases",
            "identity_id",
            "lane",
            "lease_until",
            postgresql_where=text("status = 'sending'"),
            sqlite_where=text("status = 'sending'"),
        ),
        # The drains' question each step: which messages owe a verdict now (normally none).
        Index(
            "ix_messages_owed_verdicts",
            "identity_id",
            "lane",
            "next_attempt_at",
            postgresql_where=text("pending_verdict IS NOT NULL"),
            sqlite_where=text("pending_verdict IS NOT NULL"),
        ),
        Index(  # migration 0020: the earliest scheduled message a drain rings itself for
            "ix_messages_scheduled",
            "identity_id",
            "lane",
            "not_before",
            postgresql_where=text("status = 'queued' AND not_before IS NOT NULL"),
            sqlite_where=text("status = 'queued' AND not_before IS NOT NULL"),
        ),
        Index(
            "ix_messages_waiting_age",
            "queued_at",
            "id",
            postgresql_where=text("status IN ('queued', 'sending')"),
            sqlite_where=text("status IN ('queued', 'sending')"),
        ),
        # The last hour on the overview: a range on each state time.
        Index("ix_messages_sent_at", "sent_at"),
        Index("ix_messages_delivered_at", "delivered_at"),
        Index("ix_messages_read_at", "read_at"),
        # Dead letters in the page's own order (actionable first, newest first), whole and
        # per tenant, identity and class, so a page reads 51 index entries, never sorts.
        Index(
            "ix_messages_dead_letter_order",
            "dead_letter_rank",
            column("failed_at").desc(),
            column("id").desc(),
            postgresql_where=text("status = 'failed'"),
            sqlite_where=text("status = 'failed'"),
        ),
        Index(
            "ix_messages_dead_letter_tenant",
            "tenant_id",
            "dead_letter_rank",
            column("failed_at").desc(),
            column("id").desc(),
            postgresql_where=text("status = 'failed'"),
            sqlite_where=text("status = 'failed'"),
        ),
        Index(
            "ix_messages_dead_letter_identity",
            "identity_id",
            "dead_letter_rank",
            column("failed_at").desc(),
            column("id").desc(),
            postgresql_where=text("status = 'failed'"),
            sqlite_where=text("status = 'failed'"),
        ),
        Index(
            "ix_messages_dead_letter_class",
            "failure_class",
            "dead_letter_rank",
            column("failed_at").desc(),
            column("id").desc(),
            postgresql_where=text("status = 'failed'"),
            sqlite_where=text("status = 'failed'"),
        ),
        Index(
            "ix_messages_dead_letter_identity_class",
            "identity_id",
            "failure_class",
            "dead_letter_rank",
            column("failed_at").desc(),
            column("id").desc(),
            postgresql_where=text("status = 'failed'"),
            sqlite_where=text("status = 'failed'"),
        ),
        # The overview's dead-letter count per identity and lane (the page's rows), index-only.
        Index(
            "ix_messages_dead_by_lane",
            "identity_id",
            "lane",
            postgresql_where=text("status = 'failed' AND dead_letter_rank IS NOT NULL"),
            sqlite_where=text("status = 'failed' AND dead_letter_rank IS NOT NULL"),
        ),
        # Search: an idempotency key (whole, or its first characters) without its tenant,
        # a recipient's first digits or last four, a campaign label, a template's name.
        Index(
            "ix_messages_idempotency_key",
            "idempotency_key",
            postgresql_ops={"idempotency_key": "text_pattern_ops"},
        ),
        Index("ix_messages_recipient_tail", "recipient_tail", "id"),
        Index("ix_messages_campaign", "campaign", "id"),
        Index("ix_messages_template_name", "template_name", "id"),
        Index(
            "ix_messages_recipient_prefix",
            "recipient",
            postgresql_ops={"recipient": "text_pattern_ops"},
        ),
        # GET /v1/messages, newest first per tenant, by status, class, identity, creation.
        Index("ix_messages_tenant_list", "tenant_id", "id"),
        Index("ix_messages_tenant_status", "tenant_id", "status", "id"),
        Index(
            "ix_messages_tenant_class",
            "tenant_id",
            "failure_class",
            "id",
            postgresql_where=text("failure_class IS NOT NULL"),
            sqlite_where=text("failure_class IS NOT NULL"),
        ),
        Index("ix_messages_identity_list", "identity_id", "id"),
        Index("ix_messages_tenant_created", "tenant_id", "created_at"),
        # Retention's next batch: the oldest content not purged yet, per tenant.
        Index(
            "ix_messages_unpurged",
            "tenant_id",
            "created_at",
            postgresql_where=text("content_purged_at IS NULL"),
            sqlite_where=text("content_purged_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"))
    recipient: Mapped[str] = mapped_column(String(100))
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


from app.models_meta import ProviderEvent as ProviderEvent  # noqa: E402
from app.models_meta import TemplateHold as TemplateHold  # noqa: E402
