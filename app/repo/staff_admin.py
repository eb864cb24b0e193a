"""Managing staff logins from the dashboard: create, change a role, disable or enable,
reset a password. Always within the acting admin's tenant: a tenant's admin sees and
changes only that tenant's staff, and can make no platform staff.

Each function runs inside the caller's transaction and writes its audit row there.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.crypto import hash_password
from app.models import Staff, Tenant
from app.repo.logins import end_sessions
from app.repo.staff import ROLES, create_staff, get_staff_by_email, record_audit

EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
MIN_PASSWORD = 12


class StaffActionError(ValueError):
    """Refused as asked; the message says why, and nothing changed."""


class StaffNotFoundError(LookupError):
    """No such staff member within the acting admin's tenant."""


@dataclass(frozen=True, slots=True)
class StaffRow:
    id: int
    email: str
    role: str
    tenant_id: int | None
    tenant_name: str | None
    created_at: datetime
    disabled_at: datetime | None


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: their login, and the tenant they are limited to (None: platform staff)."""

    id: int
    email: str
    tenant_id: int | None


def list_staff(session: Session, tenant_id: int | None) -> list[StaffRow]:
    """Staff the scope may see: one tenant's, or (platform, unnarrowed) everyone."""
    query = (
        select(Staff, Tenant.name)
        .outerjoin(Tenant, Tenant.id == Staff.tenant_id)
        .order_by(Tenant.name.nulls_first(), Staff.email)
    )
    if tenant_id is not None:
        query = query.where(Staff.tenant_id == tenant_id)
    return [
        StaffRow(s.id, s.email, s.role, s.tenant_id, name, s.created_at, s.disabled_at)
        for s, name in session.execute(query)
    ]


def _target(session: Session, actor: Actor, staff_id: int) -> Staff:
    """The login an admin acts on, locked together with the admin's own (in id order, so
    two admins acting on each other cannot deadlock), after checking the admin still is
    one: a request already in flight when its admin was disabled or demoted does nothing."""
    query = (
        select(Staff)
        .where(Staff.id.in_({staff_id, actor.id}))
        .order_by(Staff.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    rows = {row.id: row for row in session.scalars(query)}
    _still_admin(rows.get(actor.id))
    found = rows.get(staff_id)
    if found is None or (actor.tenant_id is not None and found.tenant_id != actor.tenant_id):
        raise StaffNotFoundError(staff_id)
    return found


def _lock_actor(session: Session, actor: Actor) -> None:
    query = (
        select(Staff)
        .where(Staff.id == actor.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    _still_admin(session.scalars(query).one_or_none())


def _still_admin(member: Staff | None) -> None:
    if member is None or member.disabled_at is not None or member.role != "admin":
        raise StaffActionError(
            "your login was disabled or is no longer an admin's: nothing was changed"
        )


def _not_self(actor: Actor, target: Staff, what: str) -> None:
    if target.id == actor.id:
        raise StaffActionError(
            f"you cannot {what} your own login (another admin can): it could lock every admin out"
        )


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise StaffActionError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")


def new_password() -> str:
    return secrets.token_urlsafe(12)


def create(
    session: Session,
    actor: Actor,
    *,
    email: str,
    role: str,
    tenant_id: int | None,
    password: str | None,
    now: datetime,
) -> tuple[StaffRow, str]:
    """A new login; returns it with its password (given, or generated), to show once.

    A tenant's admin always creates staff of their own tenant, whatever was asked."""
    _lock_actor(session, actor)
    email = email.strip().lower()
    if not EMAIL.fullmatch(email) or len(email) > 254:
        raise StaffActionError(f"{email[:60]!r} is not an email address")
    _check_role(role)
    if actor.tenant_id is not None:
        if tenant_id != actor.tenant_id:
            raise StaffActionError("a tenant's admin can create staff of their own tenant only")
    elif tenant_id is not None and session.get(Tenant, tenant_id) is None:
        raise StaffActionError(f"no tenant with id {tenant_id}")
    if password is not None and len(password) < MIN_PASSWORD:
        raise StaffActionError(f"a password needs at least {MIN_PASSWORD} characters")
    # Only within the tenant it is made for: whether another tenant has the address is
    # none of this admin's business (the same email may sign in to each, by its password).
    if get_staff_by_email(session, email, tenant_id) is not None:
        raise StaffActionError(f"a login for {email} already exists here")
    password = password or new_password()
    try:
        with session.begin_nested():
            member = create_staff(session, email, role, password, now, tenant_id)
    except IntegrityError as exc:  # created by someone else a moment ago
        raise StaffActionError(f"a login for {email} already exists here") from exc
    record_audit(
        session,
        actor.email,
        "staff.create",
        f"staff:{member.id}",
        now,
        {"email": email, "role": role, "platform": tenant_id is None},
        tenant_id=tenant_id,
    )
    row = StaffRow(member.id, email, role, tenant_id, None, now, None)
    return row, password


def change_role(session: Session, actor: Actor, staff_id: int, role: str, now: datetime) -> bool:
    """False if it already had that role."""
    _check_role(role)
    target = _target(session, actor, staff_id)
    _not_self(actor, target, "change the role of")
    if target.role == role:
        return False
    before = target.role
    session.execute(update(Staff).where(Staff.id == staff_id).values(role=role))
    end_sessions(session, staff_id)  # signed in again, they get the new role's pages
    record_audit(
        session,
        actor.email,
        "staff.role",
        f"staff:{staff_id}",
        now,
        {"email": target.email, "from": before, "to": role},
        tenant_id=target.tenant_id,
    )
    return True


def set_disabled(
    session: Session, actor: Actor, staff_id: int, disabled: bool, now: datetime
) -> bool:
    """Disable (its sessions stop at their next request) or enable a login; False if it
    already was."""
    target = _target(session, actor, staff_id)
    if disabled:
        _not_self(actor, target, "disable")
    if (target.disabled_at is not None) == disabled:
        return False
    session.execute(
        update(Staff).where(Staff.id == staff_id).values(disabled_at=now if disabled else None)
    )
    if disabled:
        # Ended for good: enabling the login again does not bring an old session back.
        end_sessions(session, staff_id)
    record_audit(
        session,
        actor.email,
        "staff.disable" if disabled else "staff.enable",
        f"staff:{staff_id}",
        now,
        {"email": target.email},
        tenant_id=target.tenant_id,
    )
    return True


def reset_password(session: Session, actor: Actor, staff_id: int, now: datetime) -> str:
    """A new generated password, stored hashed; returned to show once."""
    target = _target(session, actor, staff_id)
    password = new_password()
    session.execute(
        update(Staff).where(Staff.id == staff_id).values(password_hash=hash_password(password))
    )
    end_sessions(session, staff_id)  # a session stolen with the old password ends here
    record_audit(
        session,
        actor.email,
        "staff.password_reset",
        f"staff:{staff_id}",
        now,
        {"email": target.email},
        tenant_id=target.tenant_id,
    )
    return password
