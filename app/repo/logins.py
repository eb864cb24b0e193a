"""Dashboard sign-in: the staff member behind a session, and the sign-in throttle.

The throttle counts failed attempts in the database, not in Redis, so staff can still sign
in (and a guesser is still slowed) while Redis is down.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.models import SignInAttempt, Staff, Tenant

WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_ACCOUNT = 5
MAX_FAILURES_PER_ADDRESS = 20
KEEP = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class StaffMember:
    """What a page needs to know about who is signed in; never the password hash."""

    id: int
    email: str
    role: str
    tenant_id: int | None
    tenant_name: str | None
    time_zone: str | None = None  # the IANA zone the pages show times in (None: UTC)


def load_staff(session: Session, staff_id: int) -> StaffMember | None:
    """The staff member behind a session; None for a disabled login, so its open sessions
    stop working at their next request."""
    row = session.execute(
        select(Staff, Tenant.name)
        .outerjoin(Tenant, Tenant.id == Staff.tenant_id)
        .where(Staff.id == staff_id, Staff.disabled_at.is_(None))
    ).one_or_none()
    if row is None:
        return None
    staff, tenant_name = row
    return StaffMember(
        staff.id, staff.email, staff.role, staff.tenant_id, tenant_name, staff.time_zone
    )


def set_time_zone(session: Session, staff_id: int, zone: str | None) -> None:
    """A staff member's own time zone for the pages (None: UTC); checked by the caller."""
    session.execute(update(Staff).where(Staff.id == staff_id).values(time_zone=zone))


def _wait(
    session: Session, column: InstrumentedAttribute[str], value: str, limit: int, now: datetime
) -> timedelta:
    since = now - WINDOW
    query = select(func.count(), func.min(SignInAttempt.attempted_at)).where(
        column == value,
        SignInAttempt.succeeded.is_(False),
        SignInAttempt.attempted_at > since,
    )
    count, oldest = session.execute(query).one()
    if count < limit or oldest is None:
        return timedelta(0)
    # One more attempt is allowed once the oldest failure in the window has aged out.
    return max(timedelta(seconds=1), oldest + WINDOW - now)


def sign_in_wait(session: Session, email: str, address: str, now: datetime) -> timedelta:
    """How long this account or this address must wait before trying again (0: now)."""
    return max(
        _wait(session, SignInAttempt.email, email, MAX_FAILURES_PER_ACCOUNT, now),
        _wait(session, SignInAttempt.address, address, MAX_FAILURES_PER_ADDRESS, now),
    )


def record_sign_in(
    session: Session, email: str, address: str, succeeded: bool, now: datetime
) -> None:
    """Keep the attempt (an unknown email too, so it reads exactly like a bad password);
    a success clears the account's earlier failures; rows past a day are pruned."""
    if succeeded:
        session.execute(
            delete(SignInAttempt).where(
                SignInAttempt.email == email, SignInAttempt.succeeded.is_(False)
            )
        )
    session.execute(delete(SignInAttempt).where(SignInAttempt.attempted_at < now - KEEP))
    session.add(SignInAttempt(email=email, address=address, succeeded=succeeded, attempted_at=now))
    session.flush()
