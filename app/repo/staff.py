"""Support staff (the dashboard's users) and the audit log of operator actions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.crypto import hash_password
from app.models import AuditEntry, Staff

ROLES = ("viewer", "operator", "admin")


def create_staff(
    session: Session,
    email: str,
    role: str,
    password: str,
    now: datetime,
    tenant_id: int | None = None,
) -> Staff:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    staff = Staff(
        email=email.strip().lower(),
        role=role,
        tenant_id=tenant_id,
        password_hash=hash_password(password),
        created_at=now,
    )
    session.add(staff)
    session.flush()
    return staff


def get_staff_by_email(session: Session, email: str, tenant_id: int | None = None) -> Staff | None:
    """The login with this email in one tenant (None: among platform staff)."""
    scope = Staff.tenant_id.is_(None) if tenant_id is None else Staff.tenant_id == tenant_id
    query = select(Staff).where(Staff.email == email.strip().lower(), scope)
    return session.scalars(query).one_or_none()


def staff_with_email(session: Session, email: str) -> list[Staff]:
    """Every login with this email, in any tenant or none, oldest first: sign-in checks the
    password against each."""
    query = select(Staff).where(Staff.email == email.strip().lower()).order_by(Staff.id)
    return list(session.scalars(query))


def record_audit(
    session: Session,
    actor: str,
    action: str,
    target: str,
    now: datetime,
    detail: dict[str, Any] | None = None,
    *,
    tenant_id: int | None = None,
) -> None:
    """One audit row; `tenant_id` is the tenant whose data the action touched, so that
    tenant's staff (and only they, with platform staff) can read it."""
    session.add(
        AuditEntry(
            actor=actor,
            action=action,
            target=target,
            detail=detail,
            created_at=now,
            tenant_id=tenant_id,
        )
    )
    session.flush()


def get_staff(session: Session, staff_id: int) -> Staff | None:
    return session.get(Staff, staff_id)
