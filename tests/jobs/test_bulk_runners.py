"""Two runners of one bulk plan at once (its campaign-lane job and the sweeper), on
PostgreSQL with real commits: they take turns on the plan's lock, so every message is
requeued exactly once and the counts add up to the plan."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from flask import Flask
from sqlalchemy import select

from app.db import Database
from app.models import Message, MessageEvent
from app.models_operations import BulkPlan, BulkPlanItem
from app.repo.bulkplans import confirm_plan
from app.repo.bulkpreviews import preview_requeue
from app.repo.deadletters import Filters
from jobs.bulk import run_plan

from ..factories import make_world
from ..views.dashboard_world import NOW, failed_message

EXHAUSTED = {"provider": "whatsapp", "code": 131000, "title": "Something went wrong"}


@pytest.fixture
def committed(app: Flask, committed_db: Database) -> Iterator[Database]:
    yield committed_db


@pytest.mark.slow
def test_two_runners_of_one_plan_requeue_each_message_once(app: Flask, committed: Database) -> None:
    world = make_world(committed)
    ids = [
        failed_message(
            committed,
            world,
            failure_class="exhausted",
            error=EXHAUSTED,
            had_unknown=True,
            recipient=f"155580{n:05d}",
        )
        for n in range(40)
    ]
    with committed.transaction() as session:
        plan_id = preview_requeue(session, Filters(), {}, NOW, actor="ops").plan.id
        confirm_plan(session, plan_id, None, {"exhausted:131000"}, NOW, actor="ops@acme.test")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def runner() -> None:
        try:
            with app.app_context():
                barrier.wait(timeout=10)
                assert run_plan(
                    committed,
                    app.config["RATCHET"],
                    plan_id,
                    lambda: NOW,
                    budget_seconds=30,
                    chunk=3,
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=runner) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    with committed.transaction() as session:
        cycles = dict(session.execute(select(Message.id, Message.cycle)).all())
        requeues = session.scalars(
            select(MessageEvent.message_id).where(
                MessageEvent.kind == "requeue", MessageEvent.applied.is_(True)
            )
        ).all()
        plan = session.get(BulkPlan, plan_id)
        assert plan is not None
        outcomes = session.scalars(
            select(BulkPlanItem.outcome).where(BulkPlanItem.plan_id == plan_id)
        ).all()
    assert [cycles[i] for i in ids] == [2] * 40
    assert sorted(requeues) == sorted(ids)  # one applied requeue each
    assert outcomes == ["requeued"] * 40  # no runner took an item the other had touched
    assert (plan.status, plan.planned, plan.done, plan.skipped_already) == ("done", 40, 40, 0)
