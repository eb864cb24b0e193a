"""Bulk previews: what a bulk requeue or cancel would touch, stored as a plan.

The matching ids are stored with what the preview saw of each, and the breakdown the page
shows is read back from those stored items, so the count a person reads is exactly the set
a confirmation can tick (`confirm_plan` in `app/repo/bulkplans.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import case, exists, func, insert, or_, select
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import (
    Attempt,
    Identity,
    Message,
    MessageEvent,
    WebhookStatus,
)
from app.models_operations import BulkPlan, BulkPlanItem
from app.providers.base import FailureClass
from app.repo.bulkplans import CANCEL, PREVIEWED, REQUEUE, get_plan
from app.repo.campaigns import CampaignFilter
from app.repo.deadletters import Filters, advice, apply_filters
from app.repo.requeues import provider_may_hold

# Selected by default: the failures a second try can fix with nobody changing anything.
DEFAULT_CLASSES = frozenset({FailureClass.EXHAUSTED.value})
# How many of the excluded (held) ones the preview lists by id.
HELD_SHOWN = 50


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
    def matched(self) -> int:
        """Everything the filters matched, a bulk cancel's already claimed ones included."""
        return self.total + self.claimed_count

    @property
    def actionable(self) -> int:
        """What the plan may touch: the matched less the held and the claimed."""
        return sum(group.count for group in self.groups)

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
    by: CampaignFilter = field(default_factory=CampaignFilter)  # template, campaign, key prefix


def _queued(query: Any, filters: QueuedFilters) -> Any:
    if filters.tenant_id is not None:
        query = query.where(Message.tenant_id == filters.tenant_id)
    if filters.identity_id is not None:
        query = query.where(Message.identity_id == filters.identity_id)
    if filters.lane:
        query = query.where(Message.lane == filters.lane)
    if filters.queued_since is not None:
        query = query.where(Message.queued_at >= filters.queued_since)
    return filters.by.apply(query)


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
