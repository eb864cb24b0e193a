"""Staff logins and the sign-in throttle (docs/security.md); re-exported by `app.models`."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from app.dbtypes import Base, BigId


class Staff(Base):
    """A dashboard login. An email is unique within a tenant (and among platform staff),
    not across them: telling a tenant's admin that an address is taken would tell them
    about another tenant's staff, and let them claim an address first. Sign-in finds the
    login by email and password together."""

    __tablename__ = "staff"
    __table_args__ = (
        Index("uq_staff_email_tenant", "email", "tenant_id", unique=True),
        # A NULL tenant_id (platform staff) is distinct from every other in the index above.
        Index(
            "uq_staff_email_platform",
            "email",
            unique=True,
            postgresql_where=text("tenant_id IS NULL"),
            sqlite_where=text("tenant_id IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    email: Mapped[str] = mapped_column(String(254))
    role: Mapped[str] = mapped_column(String(10))
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"))
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime]
    # A disabled login cannot sign in, and its open sessions stop at their next request.
    disabled_at: Mapped[datetime | None]
    # Every session carries the version it was signed in under and dies when it moves:
    # sign-out, a password reset, disabling and a role change each add one.
    session_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    time_zone: Mapped[str | None] = mapped_column(String(64))  # IANA name; None: UTC


class SignInThrottle(Base):
    """The sign-in throttle's counters, kept in the database so it works while Redis is
    down: one row per client address (failures in a fixed window; past the limit the
    address waits for the window's end) and one per account and address pair (failures
    in a row; each past the free ones waits twice as long as the last). No row per account
    alone: a stranger's guesses from elsewhere never lock a named person out.

    An attempt is counted before its password is checked, under the rows' locks, so N
    guesses at once get at most the limit's checks."""

    __tablename__ = "sign_in_throttles"
    __table_args__ = (Index("ix_sign_in_throttles_updated_at", "updated_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # "address <address>" or "pair <address> <email>".
    key: Mapped[str] = mapped_column(String(330), unique=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    window_started_at: Mapped[datetime]
    updated_at: Mapped[datetime]


# Tables kept in modules of their own, registered on the same metadata; imported here so
# `app.models` still names every table.
