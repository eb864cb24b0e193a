"""Retention: content past a tenant's days is purged in small batches by the sweeper; the
facts stay; unfinished messages and statuses still to apply keep theirs."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func, select

from app.db import Database
from app.models import Attempt, Message, MessageEvent, WebhookDelivery, WebhookStatus
from app.repo.requeues import RequeueRefusedError, requeue_message
from app.repo.tenant_settings import TenantSettings, set_tenant_settings
from jobs.retention import purge_content
from jobs.sweep import sweep_once

from ..conftest import T0
from ..factories import World, make_message, make_world
from ..views.dashboard_world import failed_message
from .retention_world import ERROR, LATER, purge_all_due


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


def message(db: Database, message_id: int) -> Message:
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        session.expunge(row)
        return row


def attempts(db: Database, message_id: int) -> list[Attempt]:
    with db.transaction() as session:
        rows = list(session.query(Attempt).filter(Attempt.message_id == message_id))
        for row in rows:
            session.refresh(row)
            session.expunge(row)
        return rows


def retention(db: Database, world: World, days: int) -> None:
    with db.transaction() as session:
        set_tenant_settings(
            session, world.tenant_id, TenantSettings(None, None, days), actor="t", now=T0
        )


def test_after_its_days_a_messages_content_goes_and_its_facts_stay(
    db: Database, world: World
) -> None:
    failed = failed_message(db, world, error=ERROR, failure_class="needs_human")
    before = message(db, failed)

    purged = purge_all_due(db, LATER)

    after = message(db, failed)
    assert purged.messages == 1
    assert after.content_purged_at == LATER
    assert after.body_text is None
    # The facts: state, times, class, codes.
    assert (after.status, after.failure_class, after.failed_at, after.cycle) == (
        before.status,
        before.failure_class,
        before.failed_at,
        before.cycle,
    )
    assert after.last_error == {
        "provider": "whatsapp",
        "http_status": 400,
        "code": 132001,
        "title": "Template name does not exist",
    }
    [attempt] = attempts(db, failed)
    assert attempt.response_body is None
    assert attempt.error is not None and "raw" not in attempt.error
    assert attempt.error["code"] == 132001 and attempt.http_status == 400
    with db.transaction() as session:
        details = [
            e.detail
            for e in session.query(MessageEvent).filter(MessageEvent.message_id == failed)
            if e.detail and "error" in e.detail
        ]
    assert details and all("raw" not in d["error"] for d in details)


def test_before_its_days_and_while_unfinished_a_message_keeps_its_content(
    db: Database, world: World
) -> None:
    recent = failed_message(db, world, error=ERROR, minute=60 * 24 * 2)
    waiting = make_message(db, world, text="still to send")

    assert purge_all_due(db, T0 + timedelta(days=31)).messages == 0

    assert message(db, recent).last_error == ERROR
    assert message(db, waiting).body_text == "still to send"


def test_each_tenant_keeps_its_own_days(db: Database, world: World) -> None:
    other = make_world(db, name="globex", account_id="2000002")
    mine = failed_message(db, world, error=ERROR)
    theirs = failed_message(db, other, error=ERROR)
    retention(db, other, 7)

    purge_all_due(db, T0 + timedelta(days=8))

    assert message(db, mine).content_purged_at is None
    assert message(db, theirs).content_purged_at == T0 + timedelta(days=8)


def test_templates_keep_their_name_and_language_only(db: Database, world: World) -> None:
    from app.repo.messages import NewMessage, create_message

    with db.transaction() as session:
        created, _ = create_message(
            session,
            NewMessage(
                tenant_id=world.tenant_id,
                identity_id=world.identity_id,
                recipient="15551234567",
                lane="campaign",
                fingerprint="t" * 64,
                template={
                    "name": "order_shipped",
                    "language": "en",
                    "components": [{"type": "body", "parameters": [{"text": "Ada"}]}],
                },
            ),
            T0,
        )
        created.status = "delivered"
        message_id = created.id

    purge_all_due(db, LATER)

    assert message(db, message_id).template == {"name": "order_shipped", "language": "en"}


def test_a_purge_goes_in_small_batches_and_the_next_pass_goes_on(
    db: Database, world: World
) -> None:
    made = [failed_message(db, world, error=ERROR, minute=i) for i in range(5)]

    # No time left in the pass: one batch, the oldest first, and the rest waits.
    first = purge_content(db, LATER, batch=2, budget_seconds=0)
    assert first.messages == 2
    assert [message(db, m).content_purged_at is not None for m in made] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert purge_all_due(db, LATER, batch=2).messages == 3
    assert purge_all_due(db, LATER, batch=2).messages == 0


def test_past_its_share_a_pass_starts_no_other_batch(db: Database, world: World) -> None:
    for minute in range(3):
        failed_message(db, world, error=ERROR, minute=minute)
        delivery(db, world.identity_id, T0 + timedelta(minutes=minute))

    # No time at all: the one batch a pass always makes, and nothing after it.
    first = purge_content(db, LATER, batch=2, budget_seconds=0)
    assert first.messages + first.deliveries == 2


def test_every_tenants_backlog_moves_before_any_gets_a_second_batch(
    db: Database, world: World
) -> None:
    other = make_world(db, name="globex", account_id="2000002")
    for minute in range(4):
        failed_message(db, world, error=ERROR, minute=minute)
        failed_message(db, other, error=ERROR, minute=minute)
    calls = iter(range(100))

    def timer() -> float:  # the share runs out at its second reading
        return 0.0 if next(calls) < 2 else 10.0

    purge_content(db, LATER, batch=2, budget_seconds=1, timer=timer)
    with db.transaction() as session:
        purged = dict(
            session.execute(
                select(Message.tenant_id, func.count())
                .where(Message.content_purged_at.is_not(None))
                .group_by(Message.tenant_id)
            ).all()
        )
    mine, theirs = purged.get(world.tenant_id, 0), purged.get(other.tenant_id, 0)
    assert abs(mine - theirs) <= 2, purged


def test_a_purged_message_cannot_be_requeued(db: Database, world: World) -> None:
    failed = failed_message(db, world, error=ERROR)
    purge_all_due(db, LATER)
    with db.transaction() as session, pytest.raises(RequeueRefusedError, match="purged on"):
        requeue_message(session, failed, LATER, actor="test")


def delivery(
    db: Database, identity_id: int | None, at: datetime, *, applied: bool = True
) -> tuple[int, int]:
    payload: dict[str, Any] = {
        "id": "wamid.X",
        "status": "failed",
        "recipient_id": "15551234567",
        "errors": [{"code": 131026, "title": "Message undeliverable", "message": "detail"}],
    }
    with db.transaction() as session:
        row = WebhookDelivery(
            provider="whatsapp",
            identity_id=identity_id,
            headers={"X-Hub-Signature-256": "sha256=00"},
            body='{"entry": "the whole delivery"}',
            received_at=at,
        )
        session.add(row)
        session.flush()
        status = WebhookStatus(
            delivery_id=row.id,
            provider="whatsapp",
            identity_id=identity_id,
            dedupe_key=f"whatsapp:{row.id}:failed",
            provider_message_id="wamid.X",
            status="failed",
            received_at=at,
            payload=payload,
            applied_at=at if applied else None,
            result="applied" if applied else None,
        )
        session.add(status)
        session.flush()
        return row.id, status.id


def stored(db: Database, delivery_id: int, status_id: int) -> tuple[WebhookDelivery, Any]:
    with db.transaction() as session:
        row = session.get(WebhookDelivery, delivery_id, populate_existing=True)
        status = session.get(WebhookStatus, status_id, populate_existing=True)
        assert row is not None and status is not None
        return row, status.payload


def test_raw_webhooks_are_purged_down_to_their_codes(db: Database, world: World) -> None:
    old = delivery(db, world.identity_id, T0)
    unknown_number = delivery(db, None, T0)
    young = delivery(db, world.identity_id, T0 + timedelta(days=5))
    pending = delivery(db, world.identity_id, T0, applied=False)

    purged = purge_all_due(db, LATER)

    assert purged.deliveries == 2
    for delivery_id, status_id in (old, unknown_number):
        row, payload = stored(db, delivery_id, status_id)
        assert (row.body, row.headers, row.purged_at) == ("", {}, LATER)
        assert payload == {
            "status": "failed",
            "errors": [{"code": 131026, "title": "Message undeliverable"}],
        }
    for delivery_id, status_id in (young, pending):
        row, payload = stored(db, delivery_id, status_id)
        assert row.purged_at is None and row.body == '{"entry": "the whole delivery"}'
        assert payload["recipient_id"] == "15551234567"


def test_the_sweeper_purges_in_its_pass(app: Flask, db: Database, world: World) -> None:
    failed = failed_message(db, world, error=ERROR)
    result = sweep_once(db, app.config["RATCHET"], LATER)
    assert result.purged == 1 and "purged the content of 1" in result.describe()
    assert message(db, failed).content_purged_at == LATER
