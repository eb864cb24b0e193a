"""Tenants and their sending identities. On `app/models.py`'s metadata, which re-exports
them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.dbtypes import Base, BigId

# Purged content is kept this many days unless a tenant says otherwise (docs/api.md).
DEFAULT_RETENTION_DAYS = 30


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    # API key = "<prefix>.<secret>": looked up by prefix, the secret compared as SHA-256.
    api_key_prefix: Mapped[str] = mapped_column(String(32), unique=True)
    api_key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    # Intake limits (None: none) and how long content is kept (app/views/intake.py, retention).
    max_requests_per_second: Mapped[float | None] = mapped_column(Float)
    max_waiting: Mapped[int | None] = mapped_column(Integer)
    retention_days: Mapped[int] = mapped_column(
        Integer, default=DEFAULT_RETENTION_DAYS, server_default=str(DEFAULT_RETENTION_DAYS)
    )


class Identity(Base):
    """A sending identity: the number or Page a reply comes back to."""

    __tablename__ = "identities"
    __table_args__ = (
        # One Twilio account has many senders: there the identity is (Account SID, From).
        Index(
            "uq_identities_provider_account_id",
            "provider",
            "account_id",
            unique=True,
            postgresql_where=text("provider <> 'twilio'"),
            sqlite_where=text("provider <> 'twilio'"),
        ),
        Index(
            "uq_identities_twilio_account_id_sender",
            "provider",
            "account_id",
            "sender",
            unique=True,
            postgresql_where=text("provider = 'twilio'"),
            sqlite_where=text("provider = 'twilio'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    provider: Mapped[str] = mapped_column(String(20))
    account_id: Mapped[str] = mapped_column(String(100))
    base_url: Mapped[str] = mapped_column(String(500))
    # Fernet ciphertexts under a key derived from SECRET_KEY; never logged or shown.
    token_encrypted: Mapped[str] = mapped_column(Text)
    app_secret_encrypted: Mapped[str | None] = mapped_column(Text)
    verify_token_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    sender: Mapped[str | None] = mapped_column(String(100))
    reply_rate: Mapped[float] = mapped_column(Float, default=20.0)
    campaign_rate: Mapped[float] = mapped_column(Float, default=10.0)
    total_rate: Mapped[float] = mapped_column(Float, default=80.0)
    paused_at: Mapped[datetime | None]
    paused_reason: Mapped[str | None] = mapped_column(Text)
    paused_by: Mapped[str | None] = mapped_column(String(200))
    # The campaign lane alone paused: replies go on, campaigns wait (none is failed).
    campaign_paused_at: Mapped[datetime | None]
    campaign_paused_reason: Mapped[str | None] = mapped_column(Text)
    campaign_paused_by: Mapped[str | None] = mapped_column(String(200))
    # When the current token and app secret were given: the only thing shown of them.
    token_set_at: Mapped[datetime | None]
    app_secret_set_at: Mapped[datetime | None]
    # A broken-sender answer to an attempt claimed before either of these is stale: it
    # was given to the old token, and must not pause the identity again.
    resumed_at: Mapped[datetime | None]
    credentials_changed_at: Mapped[datetime | None]
    # Bumped with every new token or app secret, in the same UPDATE: an attempt knows which
    # credentials it was sent with exactly, whatever the clocks say.
    credentials_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime]
    # The stuck-queue alert's threshold for this identity, seconds (None: RATCHET_STUCK_AFTER).
    stuck_after: Mapped[float | None] = mapped_column(Float)
    # WhatsApp: the business account (WABA) the number belongs to, which Meta's account and
    # template webhooks name instead of the number (given, or learned from a delivery).
    business_account_id: Mapped[str | None] = mapped_column(String(100), index=True)
    # Seconds a message on each lane may still be sent when its request gives neither
    # `valid_for` nor `expires_at` (None: no limit; app/validity.py bounds it).
    reply_valid_for: Mapped[int | None] = mapped_column(Integer)
    campaign_valid_for: Mapped[int | None] = mapped_column(Integer)
