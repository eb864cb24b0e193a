"""Operator actions racing the engine (real PostgreSQL, real commits
where the interleaving spans connections). Each test states the promise it guards."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from flask import Flask
from sqlalchemy import event, select

from app.db import Database
from app.models import AuditEntry, Message, MessageEvent
from app.models_operations import BulkPlan
from app.reconcile import apply_recorded, record_delivery
from app.repo.bulkplans import PREVIEW_LIFETIME, RUNNING, PlanNotFoundError, confirm_plan
from app.repo.bulkpreviews import QueuedFilters, preview_cancel, preview_requeue
from app.repo.bulkrun import run_chunk
from app.repo.cancels import cancel_message
from app.repo.deadletters import Filters
from app.repo.inbox import IncomingStatus
from app.repo.requeues import RequeueRefusedError, requeue_message
from jobs.sweep import sweep_once

from ..factories import World, make_message, make_world
from ..views.dashboard_world import NOW, failed_message

EXHAUSTED = {"provider": "whatsapp", "code": 131000, "title": "Something went wrong"}


def _exhausted_after_timeouts(database: Database, world: World) -> int:
    """Cycle 1 ended `exhausted` after unknown outcomes (timeouts): the provider may well
    have accepted it under an id we never saw. The common bulk-requeue target."""
    return failed_message(
        database, world, failure_class="exhausted", error=EXHAUSTED, had_unknown=True
    )


def _row(database: Database, message_id: int) -> Message:
    with database.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        session.expunge(row)
        return row


def _store_delivered(database: Database, world: World, message_id: int, wamid: str) -> Any:
    """Meta reports cycle 1's copy delivered (echoing our correlation id). The view commits
    the raw delivery and its statuses first (DESIGN 6.4); applying comes after, one
    transaction per status (or the sweeper's replay when that apply failed)."""
    correlation = _row(database, message_id).correlation_id
    status = IncomingStatus(
        identity_id=world.identity_id,
        provider="whatsapp",
        provider_message_id=wamid,
        status="delivered",
        provider_time=NOW,
        correlation_id=correlation,
    )
    with database.transaction() as session:
        return record_delivery(
            session,
            provider="whatsapp",
            identity_id=world.identity_id,
            headers={},
            body="{}",
            now=NOW,
            statuses=[status],
        )


# 1. No double text: a `delivered` already committed to the inbox, not yet applied --------


def test_a_requeue_is_refused_when_a_delivered_for_the_failed_cycle_is_stored_but_not_applied(
    db: Database,
) -> None:
    """Interleaving: the webhook view commits the `delivered` (raw + status row), and before
    its per-status apply transaction runs (or while the apply waits for the sweeper's
    replay), an operator requeues. `holds_for` reads only matched statuses and events, so
    the requeue goes through; the `delivered` then lands as an earlier cycle's `stale`
    status and cycle 2 is sent: the customer, who already has the message, gets it twice."""
    world = make_world(db)
    message_id = _exhausted_after_timeouts(db, world)
    recorded = _store_delivered(db, world, message_id, "wamid.CYCLE1")

    outcome: str
    try:
        with db.transaction() as session:
            requeue_message(session, message_id, NOW + timedelta(seconds=1), actor="ana")
        outcome = "requeued"
    except RequeueRefusedError as exc:
        outcome = str(exc)
    counts = apply_recorded(db, recorded, NOW + timedelta(seconds=2))

    row = _row(db, message_id)
    assert outcome != "requeued", (
        f"requeued to cycle {row.cycle} ({row.status}) although the provider's `delivered` "
        f"for cycle 1 was already committed; the webhook then applied as {counts}"
    )


def test_a_bulk_requeue_skips_a_dead_letter_whose_delivered_is_stored_but_not_applied(
    db: Database,
) -> None:
    """The same window through a bulk plan (exhausted is ticked by default): the chunk's
    per-message re-check (`requeue_message`'s held rule) misses the stored status."""
    world = make_world(db)
    message_id = _exhausted_after_timeouts(db, world)
    with db.transaction() as session:
        plan_id = preview_requeue(session, Filters(), {}, NOW, actor="ops").plan.id
        plan = confirm_plan(session, plan_id, None, {"exhausted:131000"}, NOW, actor="ops")
        assert plan.planned == 1
    recorded = _store_delivered(db, world, message_id, "wamid.BULK1")
    with db.transaction() as session:
        run_chunk(session, plan_id, NOW + timedelta(seconds=1))
    counts = apply_recorded(db, recorded, NOW + timedelta(seconds=2))
    row = _row(db, message_id)
    assert (row.status, row.cycle) == ("failed", 1), (
        f"bulk plan requeued it to cycle {row.cycle} ({row.status}) although its `delivered` "
        f"was stored first; the webhook applied as {counts}"
    )


# 2. No double text where the provider dedupes: requeue -> cancel -> requeue ---------------


def test_a_requeue_after_a_canceled_cycle_keeps_the_key_of_the_unknown_outcome(
    db: Database,
) -> None:
    """Cycle 1 had unknown outcomes (the provider may hold it under key 1), so the requeue
    rightly keeps key 1 for cycle 2. An operator cancels cycle 2 before any attempt (it is
    queued), then requeues again: `had_unknown_outcome` was reset by the first requeue and
    cycle 2 made no attempt, so cycle 3 goes out under a NEW key. A provider that dedupes
    by key (DESIGN 1.1: "exactly once") would then accept a second copy."""
    world = make_world(db)
    message_id = _exhausted_after_timeouts(db, world)
    with db.transaction() as session:
        second = requeue_message(session, message_id, NOW, actor="ana")
        assert (second.cycle, second.provider_key_cycle) == (2, 1)
    with db.transaction() as session:
        outcome = cancel_message(
            session, message_id, NOW + timedelta(seconds=1), actor="ana", reason="wrong text"
        )
        assert outcome.canceled
    with db.transaction() as session:
        third = requeue_message(session, message_id, NOW + timedelta(seconds=2), actor="bo")
    assert third.cycle == 3
    assert third.provider_key_cycle == 1, (
        f"cycle 3 goes out under key cycle {third.provider_key_cycle}; cycle 1's unknown "
        "outcome may be held by the provider under key cycle 1"
    )


# 3. A confirmed plan must not vanish: confirm racing the sweeper's preview expiry ----------


def test_a_confirm_at_the_previews_expiry_is_not_deleted_by_the_sweeper(
    app: Flask, committed_db: Database
) -> None:
    """The sweeper's step 4 expiring a preview while the operator confirms it (the confirm
    started inside the sweeper's delete): either the confirm wins and its plan (audited,
    its page saying "Canceling N messages") stays, or the expiry wins and the confirm is
    told the plan is gone, with nothing audited. Never an audited plan deleted, so the
    campaign sent by mistake goes out."""
    world = make_world(committed_db)
    queued = [
        make_message(committed_db, world, recipient=f"1555000000{i}", lane="campaign")
        for i in range(3)
    ]
    with committed_db.transaction() as session:
        preview = preview_cancel(
            session,
            QueuedFilters(identity_id=world.identity_id),
            {},
            NOW,
            actor="ops@acme.test",
        )
        plan_id = preview.plan.id
    sweep_at = NOW + PREVIEW_LIFETIME + timedelta(seconds=1)
    main = threading.current_thread()
    fired = threading.Event()
    confirmed: dict[str, Any] = {}

    def operator_confirms() -> None:
        try:
            with committed_db.transaction() as session:
                plan = confirm_plan(
                    session,
                    plan_id,
                    None,
                    {f"{world.identity_id}:campaign"},
                    sweep_at,
                    actor="ops@acme.test",
                    reason="sent by mistake",
                )
                confirmed["status"] = plan.status
        except PlanNotFoundError as exc:
            confirmed["error"] = exc

    workers: list[threading.Thread] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if (
            threading.current_thread() is main
            and not fired.is_set()
            and statement.lstrip().upper().startswith("DELETE FROM BULK_PLAN_ITEMS")
        ):
            fired.set()
            worker = threading.Thread(target=operator_confirms)
            workers.append(worker)
            worker.start()
            # Time for the confirm to commit in the middle, if nothing stops it.
            worker.join(timeout=3)

    config = app.config["RATCHET"]
    event.listen(committed_db.engine, "before_cursor_execute", before)
    try:
        sweep_once(committed_db, config, sweep_at)
    finally:
        event.remove(committed_db.engine, "before_cursor_execute", before)
    for worker in workers:
        worker.join(timeout=30)
    assert fired.is_set() and confirmed, "the confirm did not finish"

    with committed_db.transaction() as session:
        plan = session.get(BulkPlan, plan_id)
        statuses = [session.get(Message, i).status for i in queued]  # type: ignore[union-attr]
        cancels = session.scalars(
            select(MessageEvent.id).where(MessageEvent.kind == "cancel")
        ).all()
        audited = session.scalars(
            select(AuditEntry.id).where(AuditEntry.action == "bulk.cancel")
        ).all()
    if confirmed.get("status") == RUNNING:
        # The confirm won: its plan (and its audited action) must still be there.
        assert plan is not None, (
            "the operator's confirmed (and audited) bulk cancel was deleted by the sweeper's "
            f"preview expiry; its messages stay {statuses} and will be sent "
            f"({len(cancels)} canceled)"
        )
    else:
        # The expiry won: the confirm was told the plan is gone, and nothing was audited.
        assert isinstance(confirmed.get("error"), PlanNotFoundError)
        assert plan is None and not audited


def test_control_the_same_delivered_once_applied_does_hold_the_requeue(db: Database) -> None:
    """Control for the first two: applied before the requeue, the same status is found
    (`reported delivered after it failed`), so the breaks are the unapplied window alone."""
    world = make_world(db)
    message_id = _exhausted_after_timeouts(db, world)
    recorded = _store_delivered(db, world, message_id, "wamid.CONTROL")
    assert apply_recorded(db, recorded, NOW).get("refused") == 1
    try:
        with db.transaction() as session:
            requeue_message(session, message_id, NOW + timedelta(seconds=1), actor="ana")
    except RequeueRefusedError as exc:
        assert "delivered" in str(exc)
    else:
        raise AssertionError("requeued although the applied `delivered` holds it")


# 4. Audited where the tenant can read it: a platform operator's bulk cancel ---------------


def test_a_platform_operators_bulk_cancel_of_a_tenants_messages_is_in_that_tenants_audit_log(
    db: Database,
) -> None:
    """Platform staff who did not narrow to a tenant (`tenant_scope()` is None) preview a
    cancel of tenant acme's identity and confirm it. The plan's tenant is None, so its
    audit rows (`bulk.cancel`, `bulk.cancel.done`) are written with tenant None, and the
    per-message cancels write none (`audit=False`): acme's staff reading /audit see no trace
    of who canceled their messages, although `record_audit` says the row belongs to "the
    tenant whose data the action touched"."""
    from app.repo.audit import AuditFilters, audit_page

    acme = make_world(db)
    make_world(db, name="globex", account_id="2000002")
    queued = [make_message(db, acme, recipient=f"1555000001{i}") for i in range(2)]
    with db.transaction() as session:
        plan_id = preview_cancel(
            session,
            QueuedFilters(tenant_id=None, identity_id=acme.identity_id),
            {},
            NOW,
            actor="root@platform.test",
        ).plan.id
        confirm_plan(
            session,
            plan_id,
            None,
            {f"{acme.identity_id}:campaign"},
            NOW,
            actor="root@platform.test",
            reason="sent by mistake",
        )
    with db.transaction() as session:
        assert run_chunk(session, plan_id, NOW).finished
    assert [_row(db, i).failure_class for i in queued] == ["canceled", "canceled"]
    with db.transaction() as session:
        rows, _ = audit_page(session, AuditFilters(tenant_id=acme.tenant_id))
        actions = [row.action for row in rows]
    assert any(a.startswith("bulk.cancel") or a == "message.cancel" for a in actions), (
        f"acme's messages {queued} were canceled by platform staff, but acme's audit log "
        f"shows only {actions}"
    )
