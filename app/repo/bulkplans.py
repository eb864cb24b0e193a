"""Bulk plans: preview, confirm and stop a bulk requeue or a bulk cancel.

A plan is the ids exactly as previewed, kept in the database with what the preview saw of
each (its cycle, its group in the breakdown, whether the provider may hold it). Confirming
ticks groups of it; nothing else is ever added, so a dead letter (or a queued message)
that arrives after the preview is never touched, and the count the person read is the
count the plan works through (`app/repo/bulkrun.py` carries it out, chunk by chunk).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, delete, exists, func, insert, or_, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import (
    Attempt,
    BulkPlan,
    BulkPlanItem,
    Identity,
    Message,
    MessageEvent,
    WebhookStatus,
)
from app.providers.base import FailureClass
from app.repo.deadletters import Filters, advice, apply_filters
from app.repo.messages import provider_may_hold
from app.repo.staff import record_audit

REQUEUE, CANCEL = "requeue", "cancel"
PREVIEWED, RUNNING, DONE, STOPPED = "previewed", "running", "done", "stopped"
# Selected by default: the failures a second try can fix with nobody changing anything.
DEFAULT_CLASSES = frozenset({FailureClass.EXHAUSTED.value})
# How many of the excluded (held) ones the preview lists by id.
HELD_SHOWN = 50
# A preview nobody confirmed within this long is deleted by the sweeper.
PREVIEW_LIFETIME = timedelta(hours=24)


class PlanNotFoundError(LookupError):
    """No such plan within the scope."""


class PlanRefusedError(Exception):
    """A confirmation that cannot go ahead (nothing ticked, no reason, not a preview)."""


@dataclass(frozen=True, slots=True)
class Group:
    key: str
    label: str  # "exhausted 131000", or "whatsapp …0001 / campaign"
    failure_class: str | None
    code: object
    meaning: str
    count: int
    selected: bool  # ticked by default in the preview, or ticked at confirmation


@dataclass(frozen=True, slots=True)
class Preview:
    plan: BulkPlan
    groups: list[Group]
    held_count: int
    held: list[tuple[int, str]]  # (message id, why), at most HELD_SHOWN
    # A bulk cancel: queued ones a worker claimed before the preview (not in the plan).
    claimed_count: int = 0

    @property
    def total(self) -> int:
        """Everything the filters matched, the held ones included."""
        return sum(group.count for group in self.groups) + self.held_count

    @property
    def default_count(self) -> int:
        return sum(group.count for group in self.groups if group.selected)


def _provider_evidence() -> Any:
    """SQL for "the provider may have answered for this message at all": only such a
    message can be held, so `provider_may_hold` (several queries) runs on these alone."""
    return or_(
        Message.provider_message_id.is_not(None),
        exists().where(Attempt.message_id == Message.id, Attempt.provider_message_id.is_not(None)),
        exists().where(
            MessageEvent.message_id == Message.id,
            or_(MessageEvent.source == Source.WEBHOOK.value, MessageEvent.kind == "double_send"),
        ),
        exists().where(WebhookStatus.message_id == Message.id),
    )


def _new_plan(
    session: Session,
    kind: str,
    tenant_id: int | None,
    filters: dict[str, Any],
    actor: str,
    now: datetime,
) -> BulkPlan:
    plan = BulkPlan(
        kind=kind,
        tenant_id=tenant_id,
        status=PREVIEWED,
        filters=filters,
        previewed_by=actor,
        created_at=now,
        planned=0,
        done=0,
        skipped_changed=0,
        skipped_held=0,
        skipped_already=0,
        skipped_claimed=0,
    )
    session.add(plan)
    session.flush()
    return plan


def requeue_group_key(failure_class: str | None, code: object) -> str:
    return f"{failure_class or 'unknown'}:{code if code is not None else '-'}"


def preview_requeue(
    session: Session, filters: Filters, described: dict[str, Any], now: datetime, *, actor: str
) -> Preview:
    """Store the dead letters the filters match now as a plan, and break them down.

    `described` is the filters as the page had them (kept on the plan, shown on its page).
    """
    plan = _new_plan(session, REQUEUE, filters.tenant_id, described, actor, now)
    query = apply_filters(
        select(
            Message.id,
            Message.cycle,
            Message.failure_class,
            Message.last_error,
            Identity.provider,
        )
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.status == Status.FAILED.value),
        filters,
    ).order_by(Message.id)
    rows = session.execute(query).all()
    maybe = set(
        session.scalars(
            apply_filters(
                select(Message.id).where(
                    Message.status == Status.FAILED.value, _provider_evidence()
                ),
                filters,
            )
        )
    )
    held: dict[int, str] = {}
    for message_id in sorted(maybe):
        message = session.get(Message, message_id)
        if message is not None:
            why = provider_may_hold(session, message)
            if why:
                held[message_id] = why
    items = []
    for row in rows:
        code = (row.last_error or {}).get("code")
        items.append(
            {
                "plan_id": plan.id,
                "message_id": row.id,
                "cycle": row.cycle,
                "group_key": requeue_group_key(row.failure_class, code)[:60],
                "held": held.get(row.id),
                "selected": row.failure_class in DEFAULT_CLASSES and row.id not in held,
            }
        )
    if items:
        session.execute(insert(BulkPlanItem), items)
    return load_preview(session, plan.id, filters.tenant_id)


@dataclass(frozen=True, slots=True)
class QueuedFilters:
    tenant_id: int | None = None
    identity_id: int | None = None
    lane: str | None = None
    queued_since: datetime | None = None


def _queued(query: Any, filters: QueuedFilters) -> Any:
    if filters.tenant_id is not None:
        query = query.where(Message.tenant_id == filters.tenant_id)
    if filters.identity_id is not None:
        query = query.where(Message.identity_id == filters.identity_id)
    if filters.lane:
        query = query.where(Message.lane == filters.lane)
    if filters.queued_since is not None:
        query = query.where(Message.queued_at >= filters.queued_since)
    return query


def preview_cancel(
    session: Session,
    filters: QueuedFilters,
    described: dict[str, Any],
    now: datetime,
    *,
    actor: str,
) -> Preview:
    """Store the queued messages the filters match now as a cancel plan; the ones a worker
    has claimed already are counted apart (they may be in flight: not cancellable)."""
    described = {**described, "claimed": claimed_matching(session, filters)}
    plan = _new_plan(session, CANCEL, filters.tenant_id, described, actor, now)
    rows = session.execute(
        _queued(
            select(Message.id, Message.cycle, Message.identity_id, Message.lane).where(
                Message.status == Status.QUEUED.value
            ),
            filters,
        ).order_by(Message.id)
    ).all()
    items = [
        {
            "plan_id": plan.id,
            "message_id": row.id,
            "cycle": row.cycle,
            "group_key": f"{row.identity_id}:{row.lane}",
            "held": None,
            "selected": True,
        }
        for row in rows
    ]
    if items:
        session.execute(insert(BulkPlanItem), items)
    return load_preview(session, plan.id, filters.tenant_id)


def claimed_matching(session: Session, filters: QueuedFilters) -> int:
    """Messages of the filter a worker has already claimed (not cancellable)."""
    count = session.scalar(
        _queued(
            select(func.count()).select_from(Message).where(Message.status == Status.SENDING.value),
            filters,
        )
    )
    return int(count or 0)


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


def load_preview(session: Session, plan_id: int, tenant_id: int | None) -> Preview:
    """The plan's breakdown from its stored items (the held ones apart)."""
    plan = get_plan(session, plan_id, tenant_id)
    counted = session.execute(
        select(
            BulkPlanItem.group_key,
            func.count(),
            func.sum(case((BulkPlanItem.selected.is_(True), 1), else_=0)),
        )
        .where(BulkPlanItem.plan_id == plan_id, BulkPlanItem.held.is_(None))
        .group_by(BulkPlanItem.group_key)
        .order_by(BulkPlanItem.group_key)
    ).all()
    labels = _labels(session, plan, [key for key, _, _ in counted])
    groups = []
    for key, count, selected in counted:
        label, failure_class, code, meaning = labels[key]
        groups.append(Group(key, label, failure_class, code, meaning, int(count), bool(selected)))
    # Actionable first: what is ticked by default, then the biggest.
    groups.sort(key=lambda g: (not g.selected, -g.count, g.key))
    held_count = int(
        session.scalar(
            select(func.count())
            .select_from(BulkPlanItem)
            .where(BulkPlanItem.plan_id == plan_id, BulkPlanItem.held.is_not(None))
        )
        or 0
    )
    held = [
        (row.message_id, row.held or "")
        for row in session.execute(
            select(BulkPlanItem.message_id, BulkPlanItem.held)
            .where(BulkPlanItem.plan_id == plan_id, BulkPlanItem.held.is_not(None))
            .order_by(BulkPlanItem.message_id)
            .limit(HELD_SHOWN)
        )
    ]
    claimed = int(plan.filters.get("claimed", 0)) if plan.kind == CANCEL else 0
    return Preview(plan, groups, held_count, held, claimed)


def _labels(
    session: Session, plan: BulkPlan, keys: list[str]
) -> dict[str, tuple[str, str | None, object, str]]:
    """(label, class, code, meaning) per group key."""
    found: dict[str, tuple[str, str | None, object, str]] = {}
    if plan.kind == CANCEL:
        identities = {
            row.id: row
            for row in session.execute(
                select(Identity.id, Identity.provider, Identity.account_id).where(
                    Identity.id.in_({int(k.split(":")[0]) for k in keys})
                )
            )
        }
        for key in keys:
            identity_id, lane = key.split(":", 1)
            ident = identities.get(int(identity_id))
            name = (
                f"{ident.provider} …{ident.account_id[-4:]}" if ident else f"identity {identity_id}"
            )
            found[key] = (f"{name} / {lane}", None, None, "queued, not yet claimed by a worker")
        return found
    providers = dict(
        session.execute(
            select(BulkPlanItem.group_key, func.min(Identity.provider))
            .join(Message, Message.id == BulkPlanItem.message_id)
            .join(Identity, Identity.id == Message.identity_id)
            .where(BulkPlanItem.plan_id == plan.id)
            .group_by(BulkPlanItem.group_key)
        ).all()
    )
    for key in keys:
        failure_class, _, raw_code = key.partition(":")
        code: object = int(raw_code) if raw_code.lstrip("-").isdigit() else None
        meaning, _ = advice(providers.get(key, ""), failure_class, code)
        label = failure_class + (f" {code}" if code is not None else "")
        found[key] = (label, failure_class, code, meaning)
    return found


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
