"""Bulk plans on PostgreSQL: the preview's count is what the plan touches, whatever happens
between the preview and each message's turn; running it twice touches nothing twice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.db import Database
from app.lifecycle import Source, Status
from app.models import AuditEntry, Message
from app.models_operations import BulkPlanItem
from app.repo.bulkplans import (
    DONE,
    RUNNING,
    STOPPED,
    PlanRefusedError,
    confirm_plan,
    progress_detail,
    stop_plan,
)
from app.repo.bulkpreviews import QueuedFilters, load_preview, preview_cancel, preview_requeue
from app.repo.bulkrun import run_chunk
from app.repo.cancels import dismiss_message
from app.repo.claims import claim_message
from app.repo.deadletters import Filters
from app.repo.failures import record_failed
from app.repo.requeues import requeue_message
from app.repo.transitions import apply_status

from ..factories import World, make_message, make_world
from ..views.dashboard_world import LEASE, NOW, failed_message

EXHAUSTED = {"provider": "whatsapp", "code": 131000, "title": "Something went wrong"}
TEMPLATE = {"provider": "whatsapp", "code": 132001, "title": "Template name does not exist"}
WINDOW = {"provider": "whatsapp", "code": 131047, "title": "Re-engagement message"}


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


def exhausted(db: Database, world: World, minute: int = 0) -> int:
    return failed_message(
        db, world, failure_class="exhausted", error=EXHAUSTED, had_unknown=True, minute=minute
    )


def template(db: Database, world: World, minute: int = 0) -> int:
    return failed_message(db, world, failure_class="needs_human", error=TEMPLATE, minute=minute)


def run_to_the_end(db: Database, plan_id: int, limit: int = 2) -> int:
    chunks = 0
    while True:
        with db.transaction() as session:
            chunk = run_chunk(session, plan_id, NOW, limit=limit)
        chunks += 1
        if chunk.finished:
            return chunks


def status_of(db: Database, message_id: int) -> tuple[str, int]:
    with db.transaction() as session:
        message = session.get(Message, message_id, populate_existing=True)
        assert message is not None
        return message.status, message.cycle


def test_the_preview_breaks_the_matches_down_by_class_and_code_with_only_exhausted_ticked(
    db: Database, world: World
) -> None:
    for minute in range(3):
        exhausted(db, world, minute)
    for minute in range(2):
        template(db, world, minute)
    failed_message(db, world, failure_class="permanent", error=WINDOW)
    held = failed_message(db, world, failure_class="needs_human", accepted_id="wamid.HELD")
    with db.transaction() as session:
        preview = preview_requeue(session, Filters(), {}, NOW, actor="ops@acme.test")
    groups = {g.key: (g.count, g.selected) for g in preview.groups}
    assert groups == {
        "exhausted:131000": (3, True),
        "needs_human:132001": (2, False),
        "permanent:131047": (1, False),
    }
    assert preview.total == 7
    assert preview.default_count == 3
    assert preview.held_count == 1
    assert preview.held[0][0] == held
    assert "wamid.HELD" in preview.held[0][1]


def test_ticking_a_code_adds_exactly_its_count_and_a_held_message_is_never_ticked(
    db: Database, world: World
) -> None:
    ids = [exhausted(db, world, m) for m in range(2)] + [template(db, world, 5)]
    held = failed_message(
        db, world, failure_class="needs_human", accepted_id="wamid.X", error=TEMPLATE
    )
    with db.transaction() as session:
        plan_id = preview_requeue(session, Filters(), {}, NOW, actor="ops").plan.id
        plan = confirm_plan(
            session,
            plan_id,
            None,
            {"exhausted:131000", "needs_human:132001"},
            NOW,
            actor="ops@acme.test",
        )
        assert (plan.status, plan.planned) == (RUNNING, 3)
    run_to_the_end(db, plan_id)
    assert [status_of(db, i) for i in ids] == [("queued", 2)] * 3
    assert status_of(db, held) == ("failed", 1)
    with db.transaction() as session:
        detail = progress_detail(load_preview(session, plan_id, None).plan)
    assert (detail["done"], detail["skipped"], detail["untouched"]) == (3, 0, 0)


def test_dead_letters_that_arrive_after_the_preview_are_not_touched(
    db: Database, world: World
) -> None:
    before = [exhausted(db, world, m) for m in range(3)]
    with db.transaction() as session:
        plan_id = preview_requeue(session, Filters(), {}, NOW, actor="ops").plan.id
    newer = exhausted(db, world, 8)  # same filter, same group, after the preview
    with db.transaction() as session:
        plan = confirm_plan(session, plan_id, None, {"exhausted:131000"}, NOW, actor="ops")
        assert plan.planned == 3
    run_to_the_end(db, plan_id)
    assert [status_of(db, i)[0] for i in before] == ["queued"] * 3
    assert status_of(db, newer) == ("failed", 1)


def test_each_message_is_rechecked_and_requeued_plus_skipped_equals_the_preview_count(
    db: Database, world: World
) -> None:
    plain, requeued_meanwhile, failed_again, now_held, dismissed = (
        exhausted(db, world, m) for m in range(5)
    )
    with db.transaction() as session:
        preview = preview_requeue(session, Filters(), {}, NOW, actor="ops")
        plan_id, previewed = preview.plan.id, preview.default_count
        confirm_plan(session, plan_id, None, {"exhausted:131000"}, NOW, actor="ops")
    later = NOW + timedelta(seconds=1)
    with db.transaction() as session:
        # Someone requeues one by hand; another is requeued and fails again.
        requeue_message(session, requeued_meanwhile, later, actor="someone")
        requeue_message(session, failed_again, later, actor="someone")
        claim = claim_message(session, failed_again, later, LEASE)
        assert claim is not None
        record_failed(
            session,
            claim,
            later,
            failure_class="exhausted",
            error=EXHAUSTED,
            unknown_attempts=5,
            rate_limited_attempts=0,
            had_unknown=True,
        )
        # A late `delivered` for a third: the provider holds a copy after all.
        apply_status(session, now_held, Status.DELIVERED, Source.WEBHOOK, later)
        dismiss_message(
            session,
            dismissed,
            later,
            actor="ops",
            reason="dealt with",
            tenant_id=None,
            expected_cycle=1,
        )
    run_to_the_end(db, plan_id)
    with db.transaction() as session:
        plan = load_preview(session, plan_id, None).plan
        outcomes = dict(
            session.execute(
                select(BulkPlanItem.message_id, BulkPlanItem.outcome).where(
                    BulkPlanItem.plan_id == plan_id
                )
            ).all()
        )
    assert outcomes == {
        plain: "requeued",
        requeued_meanwhile: "already",
        failed_again: "changed",
        now_held: "held",
        dismissed: "changed",
    }
    assert (plan.done, plan.skipped_already, plan.skipped_changed, plan.skipped_held) == (
        1,
        1,
        2,
        1,
    )
    assert plan.done + progress_detail(plan)["skipped"] == previewed == 5
    assert plan.status == DONE
    assert status_of(db, failed_again) == ("failed", 2)  # not requeued a second time
    assert status_of(db, now_held) == ("failed", 1)


def test_running_a_plan_twice_or_confirming_it_twice_touches_nothing_twice(
    db: Database, world: World
) -> None:
    ids = [exhausted(db, world, m) for m in range(3)]
    with db.transaction() as session:
        plan_id = preview_requeue(session, Filters(), {}, NOW, actor="ops").plan.id
        confirm_plan(session, plan_id, None, {"exhausted:131000"}, NOW, actor="ops")
        again = confirm_plan(session, plan_id, None, {"exhausted:131000"}, NOW, actor="ops")
        assert again.planned == 3
    run_to_the_end(db, plan_id)
    run_to_the_end(db, plan_id)
    assert [status_of(db, i) for i in ids] == [("queued", 2)] * 3
    with db.transaction() as session:
        rows = session.execute(
            select(AuditEntry.tenant_id, AuditEntry.action).where(
                AuditEntry.target == f"bulk:{plan_id}"
            )
        ).all()
        plan = load_preview(session, plan_id, None).plan
    assert plan.done == 3
    # Confirmed once, done once: the platform plan's own rows, and the same two in the log
    # of the tenant whose messages it touched.
    assert sorted(action for tenant, action in rows if tenant is None) == [
        "bulk.requeue",
        "bulk.requeue.done",
    ]
    assert sorted(action for tenant, action in rows if tenant == world.tenant_id) == [
        "bulk.requeue",
        "bulk.requeue.done",
    ]
    # A second plan over the same filter finds nothing left to requeue.
    with db.transaction() as session:
        second = preview_requeue(session, Filters(), {}, NOW, actor="ops")
    assert second.total == 0


def test_a_stopped_plan_touches_nothing_more_and_says_how_many_it_left(
    db: Database, world: World
) -> None:
    ids = [exhausted(db, world, m) for m in range(5)]
    with db.transaction() as session:
        plan_id = preview_requeue(session, Filters(), {}, NOW, actor="ops").plan.id
        confirm_plan(session, plan_id, None, {"exhausted:131000"}, NOW, actor="ops")
    with db.transaction() as session:
        run_chunk(session, plan_id, NOW, limit=2)
    with db.transaction() as session:
        plan = stop_plan(session, plan_id, None, NOW, actor="boss@acme.test")
        assert plan.status == STOPPED
    with db.transaction() as session:
        assert run_chunk(session, plan_id, NOW).finished
    statuses = [status_of(db, i)[0] for i in ids]
    assert statuses.count("queued") == 2
    assert statuses.count("failed") == 3
    with db.transaction() as session:
        plan = load_preview(session, plan_id, None).plan
        stop_row = session.scalars(
            select(AuditEntry).where(
                AuditEntry.action == "bulk.requeue.stop", AuditEntry.tenant_id.is_(None)
            )
        ).one()
    assert progress_detail(plan)["untouched"] == 3
    assert stop_row.actor == "boss@acme.test"
    assert stop_row.detail == {**progress_detail(plan), "via": "web"}


def test_a_plan_with_nothing_ticked_or_a_cancel_without_a_reason_is_refused(
    db: Database, world: World
) -> None:
    exhausted(db, world)
    with db.transaction() as session:
        plan_id = preview_requeue(session, Filters(), {}, NOW, actor="ops").plan.id
        with pytest.raises(PlanRefusedError, match="nothing is ticked"):
            confirm_plan(session, plan_id, None, set(), NOW, actor="ops")
    make_message(db, world)
    with db.transaction() as session:
        cancel_id = preview_cancel(
            session, QueuedFilters(identity_id=world.identity_id), {}, NOW, actor="ops"
        ).plan.id
        with pytest.raises(PlanRefusedError, match="reason"):
            confirm_plan(
                session, cancel_id, None, {f"{world.identity_id}:campaign"}, NOW, actor="ops"
            )


def test_a_bulk_cancel_cancels_the_queued_ones_and_skips_one_a_worker_claimed_first(
    db: Database, world: World
) -> None:
    ids = [make_message(db, world, recipient=f"1555000000{n}") for n in range(4)]
    with db.transaction() as session:
        preview = preview_cancel(
            session, QueuedFilters(identity_id=world.identity_id), {}, NOW, actor="ops"
        )
        assert preview.total == 4
        confirm_plan(
            session,
            preview.plan.id,
            None,
            {g.key for g in preview.groups},
            NOW,
            actor="ops@acme.test",
            reason="campaign sent by mistake",
        )
    with db.transaction() as session:
        assert claim_message(session, ids[2], NOW, LEASE) is not None
    run_to_the_end(db, preview.plan.id)
    with db.transaction() as session:
        rows = {
            m.id: (m.status, m.failure_class)
            for m in session.scalars(select(Message).where(Message.id.in_(ids)))
        }
        plan = load_preview(session, preview.plan.id, None).plan
    assert rows[ids[2]] == ("sending", None)
    assert [rows[i] for i in (ids[0], ids[1], ids[3])] == [("failed", "canceled")] * 3
    assert (plan.done, plan.skipped_claimed) == (3, 1)
