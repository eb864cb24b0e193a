"""The indexes of the `messages` table, each with the question it answers.

Kept apart from `app/models.py` only for size: `Message.__table_args__` is this tuple, and
migrations in `migrations/` create exactly it (`tests/test_schema.py` compares them).
"""

from __future__ import annotations

from sqlalchemy import Index, column, text


def _dead_letter_index(name: str, *leading: str) -> Index:
    """Failed messages in the dead-letter page's order (actionable first, newest first),
    after the columns a page filters on."""
    return Index(
        name,
        *leading,
        "dead_letter_rank",
        column("failed_at").desc(),
        column("id").desc(),
        postgresql_where=text("status = 'failed'"),
        sqlite_where=text("status = 'failed'"),
    )


MESSAGE_INDEXES = (
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
    # in app/repo/claimable.py): only this index gives that order, so the planner can never walk
    # the primary key from the table's first row instead.
    Index(
        "ix_messages_waiting",
        "identity_id",
        "lane",
        text("(id + 0)"),
        # A shard's claim filters on its key range here, in the index (migration 0022).
        "shard_key",
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
    _dead_letter_index("ix_messages_dead_letter_order"),
    _dead_letter_index("ix_messages_dead_letter_tenant", "tenant_id"),
    _dead_letter_index("ix_messages_dead_letter_identity", "identity_id"),
    _dead_letter_index("ix_messages_dead_letter_class", "failure_class"),
    _dead_letter_index("ix_messages_dead_letter_identity_class", "identity_id", "failure_class"),
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
