"""A tenant's settings: its intake limits and how long its content is kept (docs/api.md).

Set by platform staff from the CLI (`tenant settings`) or the dashboard (`/tenants`); each
change is one UPDATE and one audit row, in the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Identity, Message, Tenant
from app.repo.staff import record_audit

MAX_RETENTION_DAYS = 3650
MAX_RATE = 100_000.0
MAX_WAITING = 100_000_000


class SettingsError(ValueError):
    """A value out of range; nothing was changed."""


@dataclass(frozen=True, slots=True)
class TenantSettings:
    """None for a limit means none. `retention_days` is always set."""

    max_requests_per_second: float | None
    max_waiting: int | None
    retention_days: int

    def check(self) -> None:
        rate = self.max_requests_per_second
        if rate is not None and not 0 < rate <= MAX_RATE:
            raise SettingsError(f"requests per second must be above 0 and at most {MAX_RATE:g}")
        if self.max_waiting is not None and not 1 <= self.max_waiting <= MAX_WAITING:
            raise SettingsError(f"messages waiting must be 1 to {MAX_WAITING}")
        if not 1 <= self.retention_days <= MAX_RETENTION_DAYS:
            raise SettingsError(f"retention must be 1 to {MAX_RETENTION_DAYS} days")


@dataclass(frozen=True, slots=True)
class TenantRow:
    id: int
    name: str
    settings: TenantSettings


def settings_of(tenant: Tenant) -> TenantSettings:
    return TenantSettings(tenant.max_requests_per_second, tenant.max_waiting, tenant.retention_days)


def list_tenant_settings(session: Session) -> list[TenantRow]:
    return [
        TenantRow(t.id, t.name, settings_of(t))
        for t in session.scalars(select(Tenant).order_by(Tenant.name))
    ]


def set_tenant_settings(
    session: Session, tenant_id: int, wanted: TenantSettings, *, actor: str, now: datetime
) -> TenantRow | None:
    """Store the settings; returns the tenant as it was, or None if no such tenant."""
    wanted.check()
    tenant = session.scalars(
        select(Tenant).where(Tenant.id == tenant_id).with_for_update()
    ).one_or_none()
    if tenant is None:
        return None
    before = settings_of(tenant)
    session.execute(
        update(Tenant)
        .where(Tenant.id == tenant_id)
        .values(
            max_requests_per_second=wanted.max_requests_per_second,
            max_waiting=wanted.max_waiting,
            retention_days=wanted.retention_days,
        )
    )
    record_audit(
        session,
        actor,
        "tenant_settings",
        f"tenant:{tenant_id}",
        now,
        {"before": _as_dict(before), "after": _as_dict(wanted)},
        tenant_id=tenant_id,
    )
    return TenantRow(tenant.id, tenant.name, before)


def _as_dict(settings: TenantSettings) -> dict[str, float | int | None]:
    return {
        "max_requests_per_second": settings.max_requests_per_second,
        "max_waiting": settings.max_waiting,
        "retention_days": settings.retention_days,
    }


def count_waiting(session: Session, tenant_id: int, up_to: int) -> int:
    """The tenant's messages still waiting to be sent (queued, or sending: in flight or
    waiting for a retry), counted up to `up_to` at most: read from the waiting rows' own
    index (`ix_messages_waiting`), so its cost follows the limit, never the history."""
    waiting = (
        select(Message.id)
        .where(
            Message.identity_id.in_(select(Identity.id).where(Identity.tenant_id == tenant_id)),
            Message.status.in_([Status.QUEUED.value, Status.SENDING.value]),
        )
        .limit(up_to)
        .subquery()
    )
    return session.scalar(select(func.count()).select_from(waiting)) or 0
