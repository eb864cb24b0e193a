"""Bulk plans: confirm, stop and read a bulk requeue or a bulk cancel.

A plan is the ids exactly as previewed (`app/repo/bulkpreviews.py` stores them), kept in the
database with what the preview saw of each (its cycle, its group in the breakdown, whether
the provider may hold it). Confirming ticks groups of it; nothing else is ever added, so a
dead letter (or a queued message) that arrives after the preview is never touched, and the
count the person read is the count the plan works through (`app/repo/bulkrun.py` carries
it out, chunk by chunk).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.models import BulkPlan, BulkPlanItem
from app.repo.staff import record_audit

REQUEUE, CANCEL = "requeue", "cancel"
PREVIEWED, RUNNING, DONE, STOPPED = "previewed", "running", "done", "stopped"
# A preview nobody confirmed within this long is deleted by the sweeper.
PREVIEW_LIFETIME = timedelta(hours=24)


class PlanNotFoundError(LookupError):
    """No such plan within the scope."""


class PlanRefusedError(Exception):
    """A confirmation that cannot go ahead (nothing ticked, no reason, not a preview)."""


def get_plan(
    session: Session, plan_id: int, tenant_id: int | None, *, lock: bool = False
) -> BulkPlan:
    """A plan within the scope: a tenant's staff see their tenant's plans only."""
    query = select(BulkPlan).where(BulkPlan.id == plan_id)
    if tenant_id is not None:
        query = query.where(BulkPlan.tenant_id == tenant_id)
    if lock:
        query = query.with_for_update()
    plan = session.scalars(query.execution_options(populate_existing=True)).one_or_none()
    if plan is None:
        raise PlanNotFoundError(plan_id)
    return plan


def confirm_plan(
    session: Session,
    plan_id: int,
    tenant_id: int | None,
    groups: set[str],
    now: datetime,
    *,
    actor: str,
    reason: str | None = None,
) -> BulkPlan:
    """Tick exactly `groups` (never a held message) and start the plan.

    Confirming a plan that is already running or finished changes nothing and returns it:
    a double click, or the form sent twice, runs it once.
    """
    plan = get_plan(session, plan_id, tenant_id, lock=True)
    if plan.status != PREVIEWED:
        return plan
    if plan.kind == CANCEL and not (reason or "").strip():
        raise PlanRefusedError("a cancel needs a reason: say why these messages must not go")
    session.execute(
        update(BulkPlanItem)
        .where(BulkPlanItem.plan_id == plan_id)
        .values(selected=BulkPlanItem.group_key.in_(groups) & BulkPlanItem.held.is_(None))
        .execution_options(synchronize_session=False)
    )
    planned = int(
        session.scalar(
            select(func.count())
            .select_from(BulkPlanItem)
            .where(BulkPlanItem.plan_id == plan_id, BulkPlanItem.selected.is_(True))
        )
        or 0
    )
    if planned == 0:
        raise PlanRefusedError("nothing is ticked: tick at least one group")
    plan.status = RUNNING
    plan.planned = planned
    plan.confirmed_by = actor
    plan.confirmed_at = now
    plan.reason = (reason or "").strip() or None
    record_audit(
        session,
        actor,
        f"bulk.{plan.kind}",
        f"bulk:{plan.id}",
        now,
        {
            "planned": planned,
            "groups": sorted(groups),
            "filters": plan.filters,
            "reason": plan.reason,
            "via": "web",
            "excluded_held": plan.kind == REQUEUE
            and bool(
                session.scalar(
                    select(func.count())
                    .select_from(BulkPlanItem)
                    .where(BulkPlanItem.plan_id == plan_id, BulkPlanItem.held.is_not(None))
                )
            ),
        },
        tenant_id=plan.tenant_id,
    )
    session.flush()
    return plan


def stop_plan(
    session: Session, plan_id: int, tenant_id: int | None, now: datetime, *, actor: str
) -> BulkPlan:
    """Stop a plan: the chunk in progress (which holds the plan's row lock) finishes, and
    nothing more is touched. Stopping a plan that is done changes nothing."""
    plan = get_plan(session, plan_id, tenant_id, lock=True)
    if plan.status not in (PREVIEWED, RUNNING):
        return plan
    was = plan.status
    plan.status = STOPPED
    plan.canceled_by = actor
    plan.canceled_at = now
    if was == RUNNING:
        record_audit(
            session,
            actor,
            f"bulk.{plan.kind}.stop",
            f"bulk:{plan.id}",
            now,
            {**progress_detail(plan), "via": "web"},
            tenant_id=plan.tenant_id,
        )
    session.flush()
    return plan


def progress_detail(plan: BulkPlan) -> dict[str, Any]:
    skipped = plan.skipped_changed + plan.skipped_held + plan.skipped_already + plan.skipped_claimed
    return {
        "planned": plan.planned,
        "done": plan.done,
        "skipped": skipped,
        "skipped_changed": plan.skipped_changed,
        "skipped_held": plan.skipped_held,
        "skipped_already": plan.skipped_already,
        "skipped_claimed": plan.skipped_claimed,
        "untouched": plan.planned - plan.done - skipped,
    }


def expire_previews(session: Session, before: datetime) -> int:
    """Delete previews nobody confirmed since `before` (their stored ids with them): a
    preview is a question, and a stale one must not be confirmed on an old picture."""
    stale = list(
        session.scalars(
            select(BulkPlan.id).where(BulkPlan.status == PREVIEWED, BulkPlan.created_at < before)
        )
    )
    if stale:
        session.execute(delete(BulkPlanItem).where(BulkPlanItem.plan_id.in_(stale)))
        session.execute(delete(BulkPlan).where(BulkPlan.id.in_(stale)))
    return len(stale)


def running_plan_ids(session: Session, limit: int = 20) -> list[int]:
    return list(
        session.scalars(
            select(BulkPlan.id).where(BulkPlan.status == RUNNING).order_by(BulkPlan.id).limit(limit)
        )
    )


def plans_touching(session: Session, message_id: int) -> list[tuple[BulkPlan, BulkPlanItem]]:
    """Every plan that listed this message, with what it did to it (the message page)."""
    return [
        (plan, item)
        for plan, item in session.execute(
            select(BulkPlan, BulkPlanItem)
            .join(BulkPlanItem, BulkPlanItem.plan_id == BulkPlan.id)
            .where(BulkPlanItem.message_id == message_id, BulkPlan.status != PREVIEWED)
            .order_by(BulkPlan.id)
        )
    ]
