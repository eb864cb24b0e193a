"""Dashboard sign-in: the staff member behind a session, and ending a login's sessions.
(The sign-in throttle is `app/repo/sign_in_throttle.py`.)"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.models import Staff, Tenant


@dataclass(frozen=True, slots=True)
class StaffMember:
    """What a page needs to know about who is signed in; never the password hash."""

    id: int
    email: str
    role: str
    tenant_id: int | None
    tenant_name: str | None
    session_version: int = 0
    time_zone: str | None = None  # the IANA zone the pages show times in (None: UTC)


def load_staff(session: Session, staff_id: int) -> StaffMember | None:
    """The staff member behind a session; None for a disabled login, so its open sessions
    stop working at their next request (the caller also compares `session_version`)."""
    row = session.execute(
        select(Staff, Tenant.name)
        .outerjoin(Tenant, Tenant.id == Staff.tenant_id)
        .where(Staff.id == staff_id, Staff.disabled_at.is_(None))
    ).one_or_none()
    if row is None:
        return None
    staff, tenant_name = row
    return StaffMember(
        staff.id,
        staff.email,
        staff.role,
        staff.tenant_id,
        tenant_name,
        staff.session_version,
        staff.time_zone,
    )


def set_time_zone(session: Session, staff_id: int, zone: str | None) -> None:
    """A staff member's own time zone for the pages (None: UTC); checked by the caller."""
    session.execute(update(Staff).where(Staff.id == staff_id).values(time_zone=zone))


def end_sessions(session: Session, staff_id: int) -> None:
    """Every open session of this login stops at its next request: each carries the
    version it signed in under, and this moves it (one statement, so two calls at once
    both count)."""
    session.execute(
        update(Staff).where(Staff.id == staff_id).values(session_version=Staff.session_version + 1)
    )
