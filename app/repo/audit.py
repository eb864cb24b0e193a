"""Reading the audit log (`record_audit` in `app/repo/staff.py` writes it): newest first,
filtered by actor, action, target and time, paged by keyset on the id."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, not_, or_, select
from sqlalchemy.orm import Session

from app.models import AuditEntry
from app.models_operations import BulkPlanItem

PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class AuditFilters:
    # A tenant's staff: that tenant's rows only. None: platform staff, every row.
    tenant_id: int | None = None
    actor: str | None = None  # a part of the actor, any case
    action: str | None = None  # an action, or its family ("bulk" matches "bulk.requeue")
    target: str | None = None  # exactly: "message:12", "bulk:3", "identity:2"
    since: datetime | None = None
    until: datetime | None = None


def audit_page(
    session: Session, filters: AuditFilters, before_id: int | None = None, limit: int = PAGE_SIZE
) -> tuple[list[AuditEntry], int | None]:
    """One page of audit rows, newest first, and the id the next page starts before."""
    query = select(AuditEntry)
    if filters.tenant_id is not None:
        query = query.where(AuditEntry.tenant_id == filters.tenant_id)
    else:
        # Every tenant at once (platform staff): a plan across tenants is its own row once,
        # not again as each tenant's share of it (those are for each tenant's own log).
        share = AuditEntry.detail["across_tenants"].as_boolean().is_(True)
        query = query.where(not_(and_(AuditEntry.tenant_id.is_not(None), share)))
    if filters.actor:
        escaped = filters.actor.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(AuditEntry.actor.ilike(f"%{escaped}%", escape="\\"))
    if filters.action:
        query = query.where(
            or_(
                AuditEntry.action == filters.action,
                AuditEntry.action.startswith(f"{filters.action}.", autoescape=True),
            )
        )
    if filters.target:
        query = query.where(AuditEntry.target == filters.target)
    if filters.since is not None:
        query = query.where(AuditEntry.created_at >= filters.since)
    if filters.until is not None:
        query = query.where(AuditEntry.created_at < filters.until)
    if before_id is not None:
        query = query.where(AuditEntry.id < before_id)
    rows = list(session.scalars(query.order_by(AuditEntry.id.desc()).limit(limit + 1)))
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].id
    return rows, None


def audit_actions(session: Session, tenant_id: int | None) -> list[str]:
    """The actions recorded so far (the filter's choices)."""
    query = select(AuditEntry.action).distinct().order_by(AuditEntry.action)
    if tenant_id is not None:
        query = query.where(AuditEntry.tenant_id == tenant_id)
    return list(session.scalars(query))


def audit_for_message(
    session: Session, message_id: int, tenant_id: int | None = None
) -> list[AuditEntry]:
    """The audit rows that touched one message: its own, and those of every bulk plan
    that listed it (a plan writes one row for all its messages). Within `tenant_id` (a
    tenant's staff) only that tenant's rows: a platform plan's own row carries every
    tenant's counts and filters, and the tenant has a row of its own for it."""
    plan_ids = session.scalars(
        select(BulkPlanItem.plan_id).where(
            BulkPlanItem.message_id == message_id, BulkPlanItem.selected.is_(True)
        )
    )
    targets = [f"message:{message_id}", *(f"bulk:{plan_id}" for plan_id in plan_ids)]
    return list(
        session.scalars(
            select(AuditEntry)
            .where(
                AuditEntry.target.in_(targets),
                *([AuditEntry.tenant_id == tenant_id] if tenant_id is not None else []),
            )
            .order_by(AuditEntry.id)
        )
    )
