"""Carrying out a confirmed bulk plan, one chunk per transaction.

Each chunk:
1. Locks the plan's row. A stop (`stop_plan`) takes the same lock, so once it returns no
   chunk touches anything more; two runners of one plan (the sweeper and a campaign-lane
   job) take turns, never the same item twice.
2. Takes the next items not yet touched and re-checks each message as it is now:
   - requeue: still failed in the cycle previewed and still on the list, nothing in
     flight, and the provider may not hold it (`provider_may_hold`, again) -> requeued by
     `requeue_message`, the same rule as a single requeue;
   - cancel: still queued in the cycle previewed -> canceled by `cancel_message`'s
     compare-and-set; a worker's claim that won the race leaves it `claimed`.
   Anything else is skipped with its reason: `changed` since the preview, `held` (the
   provider may hold it now), `already` requeued, or `claimed` by a worker.
3. Writes each item's outcome and the plan's counters in the same transaction, so
   done + skipped + untouched always equals the planned count, whatever crashes when.
4. Marks the plan done when nothing is left, with its audit row of the final counts.
The caller rings the drains of what was requeued after the commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Message
from app.models_operations import BulkPlan, BulkPlanItem
from app.repo.bulkplans import CANCEL, DONE, RUNNING, get_plan, progress_detail, record_plan_audit
from app.repo.cancels import cancel_message
from app.repo.requeues import RequeueRefusedError, provider_may_hold, requeue_message

CHUNK = 100
REQUEUED, CANCELED = "requeued", "canceled"
CHANGED, HELD, ALREADY, CLAIMED = "changed", "held", "already", "claimed"
SKIP_COUNTER = {
    CHANGED: "skipped_changed",
    HELD: "skipped_held",
    ALREADY: "skipped_already",
    CLAIMED: "skipped_claimed",
}


@dataclass
class Chunk:
    plan_id: int
    touched: int = 0
    finished: bool = False
    # (identity, lane) pairs with a message made due: ring them after the commit.
    to_ring: set[tuple[int, str]] = field(default_factory=set)


def _requeue_one(session: Session, plan: BulkPlan, item: BulkPlanItem, now: datetime) -> str:
    message = session.scalars(
        select(Message)
        .where(Message.id == item.message_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
    if message.cycle != item.cycle:
        # Requeued by someone (or another plan) since: failed again is a new picture.
        return CHANGED if message.status == Status.FAILED.value else ALREADY
    if message.status != Status.FAILED.value or message.dead_letter_rank is None:
        return CHANGED  # dismissed since the preview
    if message.lease_until is not None and message.lease_until > now:
        return CHANGED
    try:
        # The single requeue's rule, on the row locked above: it refuses when the provider
        # may hold a deliverable copy now (a webhook since the preview, say).
        requeue_message(session, message.id, now, actor=f"{plan.confirmed_by} (bulk #{plan.id})")
    except RequeueRefusedError:
        return HELD if provider_may_hold(session, message) else CHANGED
    return REQUEUED


def _cancel_one(session: Session, plan: BulkPlan, item: BulkPlanItem, now: datetime) -> str:
    outcome = cancel_message(
        session,
        item.message_id,
        now,
        actor=f"{plan.confirmed_by} (bulk #{plan.id})",
        reason=plan.reason or "bulk cancel",
        expected_cycle=item.cycle,
        audit=False,
        via=f"bulk #{plan.id}",
    )
    if outcome.canceled:
        return CANCELED
    return CLAIMED if outcome.claimed else CHANGED


def run_chunk(session: Session, plan_id: int, now: datetime, limit: int = CHUNK) -> Chunk:
    """Carry out the next `limit` items of a running plan (see the module's steps)."""
    chunk = Chunk(plan_id)
    plan = get_plan(session, plan_id, None, lock=True)
    if plan.status != RUNNING:
        chunk.finished = True
        return chunk
    items = list(
        session.scalars(
            select(BulkPlanItem)
            .where(
                BulkPlanItem.plan_id == plan_id,
                BulkPlanItem.selected.is_(True),
                BulkPlanItem.outcome.is_(None),
            )
            .order_by(BulkPlanItem.message_id)
            .limit(limit)
        )
    )
    touch = _cancel_one if plan.kind == CANCEL else _requeue_one
    for item in items:
        outcome = touch(session, plan, item, now)
        item.outcome = outcome
        item.done_at = now
        if outcome in (REQUEUED, CANCELED):
            plan.done += 1
            if outcome == REQUEUED:
                message = session.get(Message, item.message_id)
                assert message is not None
                chunk.to_ring.add((message.identity_id, message.lane))
        else:
            counter = SKIP_COUNTER[outcome]
            setattr(plan, counter, getattr(plan, counter) + 1)
        chunk.touched += 1
    session.flush()
    left = session.scalar(
        select(func.count())
        .select_from(BulkPlanItem)
        .where(
            BulkPlanItem.plan_id == plan_id,
            BulkPlanItem.selected.is_(True),
            BulkPlanItem.outcome.is_(None),
        )
    )
    if not left:
        plan.status = DONE
        plan.finished_at = now
        record_plan_audit(
            session,
            plan,
            plan.confirmed_by or "unknown",
            f"bulk.{plan.kind}.done",
            now,
            {**progress_detail(plan), "via": "bulk runner"},
        )
        chunk.finished = True
    session.flush()
    return chunk
