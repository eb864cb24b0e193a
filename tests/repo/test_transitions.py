"""The state machine applied in SQL: compare-and-set, the event log, fences and races."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.db import Database
from app.lifecycle import Refusal, Source, Status
from app.models import MessageEvent
from app.repo.events import list_events
from app.repo.messages import get_message
from app.repo.requeues import RequeueRefusedError, requeue_message
from app.repo.transitions import apply_status

from ..conftest import T0
from ..factories import make_message, make_world


def move(database: Database, message_id: int, target: str, source: Source, **kwargs: object):
    now = kwargs.pop("now", T0 + timedelta(seconds=5))
    with database.transaction() as session:
        return apply_status(session, message_id, Status(target), source, now, **kwargs)  # type: ignore[arg-type]


def status_of(database: Database, message_id: int):
    with database.transaction() as session:
        message = get_message(session, message_id)
        assert message is not None
        return message


def test_a_claim_moves_queued_to_sending_and_records_an_event(db: Database) -> None:
    message_id = make_message(db, make_world(db))
    result = move(db, message_id, "sending", Source.WORKER)
    assert result.applied and result.from_status is Status.QUEUED
    message = status_of(db, message_id)
    assert message.status == "sending"
    assert message.sending_at == T0 + timedelta(seconds=5)
    with db.transaction() as session:
        kinds = [(e.kind, e.source, e.applied) for e in list_events(session, message_id)]
    assert kinds == [("create", "api", True), ("sending", "worker", True)]


def test_a_late_sent_after_delivered_is_refused_and_fills_only_its_own_timestamp(
    db: Database,
) -> None:
    message_id = make_message(db, make_world(db))
    move(db, message_id, "sending", Source.WORKER)
    delivered_at = T0 + timedelta(seconds=20)
    sent_at = T0 + timedelta(seconds=10)
    move(db, message_id, "delivered", Source.WEBHOOK, provider_time=delivered_at)
    result = move(db, message_id, "sent", Source.WEBHOOK, provider_time=sent_at)
    assert not result.applied and result.refusal is Refusal.LATE
    message = status_of(db, message_id)
    assert message.status == "delivered"
    assert message.delivered_at == delivered_at
    assert message.sent_at == sent_at
    # A second late `sent` with another time does not overwrite the first.
    move(db, message_id, "sent", Source.WEBHOOK, provider_time=sent_at + timedelta(seconds=1))
    assert status_of(db, message_id).sent_at == sent_at


def test_sent_after_failed_leaves_it_failed_with_its_error(db: Database) -> None:
    message_id = make_message(db, make_world(db))
    move(db, message_id, "sending", Source.WORKER)
    error = {"code": 131026, "title": "Message undeliverable"}
    move(db, message_id, "failed", Source.WORKER, extra_values={"last_error": error})
    result = move(db, message_id, "sent", Source.WEBHOOK)
    assert result.refusal is Refusal.FAILED_IS_FINAL
    message = status_of(db, message_id)
    assert message.status == "failed" and message.last_error == error
    assert message.sent_at is None


def test_a_fenced_write_from_a_stale_attempt_changes_nothing(db: Database) -> None:
    message_id = make_message(db, make_world(db))
    move(db, message_id, "sending", Source.WORKER)
    result = move(db, message_id, "failed", Source.WORKER, attempt=7)
    assert result.refusal is Refusal.STALE
    assert status_of(db, message_id).status == "sending"


def test_a_duplicate_status_adds_no_event(db: Database) -> None:
    message_id = make_message(db, make_world(db))
    move(db, message_id, "sending", Source.WORKER)
    key = "whatsapp:wamid.A:delivered"
    first = move(db, message_id, "delivered", Source.WEBHOOK, dedupe_key=key)
    second = move(db, message_id, "delivered", Source.WEBHOOK, dedupe_key=key)
    assert first.applied and second.duplicate and not second.applied
    with db.transaction() as session:
        assert len(list_events(session, message_id)) == 3


def test_a_requeue_starts_a_new_cycle_and_clears_the_row_timestamps(db: Database) -> None:
    message_id = make_message(db, make_world(db))
    move(db, message_id, "sending", Source.WORKER, extra_values={"attempt": 1})
    move(db, message_id, "failed", Source.WORKER, extra_values={"failure_class": "permanent"})
    with db.transaction() as session:
        message = requeue_message(session, message_id, T0 + timedelta(minutes=1), actor="ana")
    # An attempt was made and answered: the new cycle goes out under a key of its own.
    assert (message.status, message.cycle, message.provider_key_cycle) == ("queued", 2, 2)
    assert message.failed_at is None and message.sending_at is None
    assert message.queued_at == T0 + timedelta(minutes=1)
    with db.transaction() as session:
        requeue = list_events(session, message_id)[-1]
    assert (requeue.kind, requeue.actor, requeue.from_status) == ("requeue", "ana", "failed")


def test_a_requeue_of_a_message_that_has_not_failed_is_refused(db: Database) -> None:
    message_id = make_message(db, make_world(db))
    with db.transaction() as session, pytest.raises(RequeueRefusedError, match="not failed"):
        requeue_message(session, message_id, T0, actor="ana")


@pytest.mark.parametrize("run", range(10))
def test_racing_delivered_and_a_late_sent_never_leaves_it_below_delivered(
    committed_db: Database, run: int
) -> None:
    world = make_world(committed_db)
    message_id = make_message(committed_db, world)
    move(committed_db, message_id, "sending", Source.WORKER)
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def webhook(status: str, key: str) -> None:
        try:
            barrier.wait(timeout=10)
            move(committed_db, message_id, status, Source.WEBHOOK, dedupe_key=key)
        except BaseException as exc:  # pragma: no cover - surfaced by the assert below
            errors.append(exc)

    threads = [
        threading.Thread(target=webhook, args=("delivered", "w:A:delivered")),
        threading.Thread(target=webhook, args=("sent", "w:A:sent")),
        threading.Thread(target=webhook, args=("delivered", "w:A:delivered")),  # a duplicate
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert status_of(committed_db, message_id).status == "delivered"
    with committed_db.transaction() as session:
        keys = session.scalars(
            select(MessageEvent.dedupe_key).where(
                MessageEvent.message_id == message_id, MessageEvent.source == "webhook"
            )
        ).all()
    assert sorted(keys) == ["w:A:delivered", "w:A:sent"]
