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

from app.models import Message
from app.models_operations import BulkPlan, BulkPlanItem
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
    record_plan_audit(
        session,
        plan,
        actor,
        f"bulk.{plan.kind}",
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
        record_plan_audit(
            session,
            plan,
            actor,
            f"bulk.{plan.kind}.stop",
            now,
            {**progress_detail(plan), "via": "web"},
        )
    session.flush()
    return plan


def record_plan_audit(
    session: Session,
    plan: BulkPlan,
    actor: str,
    action: str,
    now: datetime,
    detail: dict[str, Any],
) -> None:
    """The plan's audit row, in its tenant's log. A platform plan across tenants (made
    without narrowing to one) also writes one row into each tenant's log whose messages it
    selected, with that tenant's own counts only: every tenant sees who touched its
    messages, and none sees another's figures or filters."""
    record_audit(session, actor, action, f"bulk:{plan.id}", now, detail, tenant_id=plan.tenant_id)
    if plan.tenant_id is not None:
        return
    shares: dict[int, dict[str, int]] = {}
    for tenant_id, outcome, count in session.execute(
        select(Message.tenant_id, BulkPlanItem.outcome, func.count())
        .join(Message, Message.id == BulkPlanItem.message_id)
        .where(BulkPlanItem.plan_id == plan.id, BulkPlanItem.selected.is_(True))
        .group_by(Message.tenant_id, BulkPlanItem.outcome)
    ):
        share = shares.setdefault(tenant_id, {"planned": 0, "done": 0, "skipped": 0})
        share["planned"] += count
        if outcome in ("requeued", "canceled"):
            share["done"] += count
        elif outcome is not None:
            share["skipped"] += count
    for tenant_id, share in sorted(shares.items()):
        record_audit(
            session,
            actor,
            action,
            f"bulk:{plan.id}",
            now,
            {**share, "reason": plan.reason, "via": detail.get("via"), "across_tenants": True},
            tenant_id=tenant_id,
        )


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
    # Locked, skipping a plan being confirmed right now, and deleted only while still a
    # preview: a confirmation that commits first keeps its plan (and its audited action).
    stale = list(
        session.scalars(
            select(BulkPlan.id)
            .where(BulkPlan.status == PREVIEWED, BulkPlan.created_at < before)
            .with_for_update(skip_locked=True)
        )
    )
    if stale:
        still_previews = select(BulkPlan.id).where(
            BulkPlan.id.in_(stale), BulkPlan.status == PREVIEWED
        )
        session.execute(delete(BulkPlanItem).where(BulkPlanItem.plan_id.in_(still_previews)))
        session.execute(
            delete(BulkPlan).where(BulkPlan.id.in_(stale), BulkPlan.status == PREVIEWED)
        )
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
