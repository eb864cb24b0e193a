"""The one-statement webhook paths under interleavings forced in a fixed order.

Each test holds one transaction open at the point that matters, starts the other side on
its own connection, waits until PostgreSQL shows it blocked on a lock (or lets it finish
when it cannot block), and only then commits or rolls back the first: no sleeps decide the
order. They cover what a single WITH sees when it had to wait (one snapshot for all its
sub-statements; only the row lock and the UPDATEs' re-check see the newer row)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import select, text

from app.db import Database
from app.lifecycle import Source, Status
from app.models import Message, MessageEvent, WebhookDelivery, WebhookStatus
from app.reconcile import apply_recorded, record_delivery
from app.repo.acceptance import accept_at_once, record_accepted
from app.repo.attempts import finish_attempt
from app.repo.requeues import requeue_message
from app.repo.transitions import apply_status
from jobs.sweep import sweep_once

from .conftest import at
from .factories import World, make_world
from .whatsapp_world import claimed, incoming, record, sent_message


class Background:
    """One call on a thread of its own (its own pooled connection), joined with a limit."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = call()
            except BaseException as exc:  # surfaced by join
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "still blocked after 30 s"
        if self.error is not None:
            raise self.error
        return self.result


def wait_until_blocked_on_a_lock(database: Database) -> None:
    """Until a session of this test database waits on a lock (a polled condition)."""
    deadline = time.monotonic() + 10
    with database.engine.connect() as connection:
        while True:
            waiting = connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            connection.rollback()  # pg_stat_activity is read once per transaction
            if waiting:
                return
            assert time.monotonic() < deadline, "nothing blocked on a lock"
            time.sleep(0.005)


def rows(database: Database, message_id: int) -> tuple[Message, list[MessageEvent]]:
    with database.transaction() as session:
        message = session.get(Message, message_id, populate_existing=True)
        assert message is not None
        events = list(
            session.scalars(
                select(MessageEvent)
                .where(MessageEvent.message_id == message_id, MessageEvent.source == "webhook")
                .order_by(MessageEvent.id)
            )
        )
        return message, events


def status_row(database: Database, status_id: int) -> WebhookStatus:
    with database.transaction() as session:
        row = session.get(WebhookStatus, status_id, populate_existing=True)
        assert row is not None
        return row


# Two deliveries of one status at once: the dedupe key decides -----------------------------


@pytest.mark.parametrize("first_ends", ["commits", "rolls back"])
def test_the_same_status_recorded_twice_at_once_is_stored_once(
    committed_db: Database, first_ends: str
) -> None:
    world = make_world(committed_db)
    message_id = sent_message(committed_db, world, "wamid.TWIN")
    status = incoming(world, "wamid.TWIN", "delivered", 20)

    class RolledBack(Exception):
        pass

    try:
        with committed_db.transaction() as session:
            first = record_delivery(
                session,
                provider="whatsapp",
                identity_id=world.identity_id,
                headers={},
                body="{}",
                now=at(30),
                statuses=[status],
            )
            # The second request's insert waits on the first's uncommitted key.
            second_call = Background(lambda: record(committed_db, status, seconds=31))
            wait_until_blocked_on_a_lock(committed_db)
            if first_ends == "rolls back":
                raise RolledBack
    except RolledBack:
        pass
    second = second_call.join()

    if first_ends == "commits":
        assert (len(first.to_apply), second.to_apply, second.duplicates) == (1, [], 1)
        to_apply = first
    else:  # the first's row never existed: the second stores it as new
        assert (len(second.to_apply), second.duplicates) == (1, 0)
        to_apply = second
    assert apply_recorded(committed_db, to_apply, at(32)) == {"duplicate": 0, "applied": 1}
    if first_ends == "commits":
        assert apply_recorded(committed_db, second, at(33)) == {"duplicate": 1}
    with committed_db.transaction() as session:
        deliveries = session.scalars(select(WebhookDelivery.id)).all()
        statuses = session.scalars(select(WebhookStatus.id)).all()
    assert len(deliveries) == (2 if first_ends == "commits" else 1)
    assert len(statuses) == 1
    message, events = rows(committed_db, message_id)
    assert (message.status, message.delivered_at) == ("delivered", at(20))
    assert [(e.to_status, e.applied) for e in events] == [("delivered", True)]


# A status whose message row is locked by another writer -----------------------------------

# (what the lock holder does, the status that waits for it) -> the waiting status's result,
# its event's (from_status, refusal), and the message's (status, delivered_at, read_at,
# failed_at) once both are done.
WAITS = {
    "read, then a late delivered": (
        (Status.READ, 22),
        ("delivered", 20),
        ("refused", "read", "late"),
        ("read", at(20), at(22), None),  # the late status still fills its own timestamp
    ),
    "delivered, then read": (
        (Status.DELIVERED, 20),
        ("read", 22),
        ("applied", "delivered", None),
        ("read", at(20), at(22), None),
    ),
    "delivered, then failed": (
        (Status.DELIVERED, 20),
        ("failed", 22),
        ("refused", "delivered", "already_shown"),
        ("delivered", at(20), None, None),
    ),
    "failed, then delivered": (
        (Status.FAILED, 20),
        ("delivered", 22),
        ("refused", "failed", "failed_is_final"),
        ("failed", None, None, at(20)),
    ),
}


@pytest.mark.parametrize("case", WAITS, ids=list(WAITS))
def test_a_status_that_waited_for_the_message_lock_decides_on_the_committed_row(
    committed_db: Database, case: str
) -> None:
    (held_target, held_at), (word, seconds), expected, final = WAITS[case]
    world = make_world(committed_db)
    wamid = f"wamid.WAIT.{case.replace(' ', '').replace(',', '')}"
    message_id = sent_message(committed_db, world, wamid)
    waiting = record(committed_db, incoming(world, wamid, word, seconds))
    (stored,) = waiting.to_apply

    with committed_db.transaction() as session:
        assert apply_status(
            session,
            message_id,
            held_target,
            Source.WEBHOOK,
            at(held_at),
            provider_time=at(held_at),
        ).applied
        # The status's one statement now waits on the row this transaction holds; its
        # snapshot still has the message at `sent`.
        applying = Background(lambda: apply_recorded(committed_db, waiting, at(30)))
        wait_until_blocked_on_a_lock(committed_db)
    counts = applying.join()

    result, from_status, refusal = expected
    assert counts == {"duplicate": 0, result: 1}
    message, events = rows(committed_db, message_id)
    assert (message.status, message.delivered_at, message.read_at, message.failed_at) == final
    last = events[-1]
    assert (last.to_status, last.from_status, last.refusal) == (
        word,
        from_status,
        refusal,
    )
    if word == "failed":
        assert message.last_error is None  # a refused failure writes none of its values
    row = status_row(committed_db, stored.id)
    assert (row.result, row.applied_at, row.message_id, row.tries) == (
        result,
        at(30),
        message_id,
        1,
    )


def test_a_status_that_waited_while_its_message_was_requeued_is_stale_on_its_own_cycle(
    committed_db: Database,
) -> None:
    world = make_world(committed_db)
    claim = claimed(committed_db, world)
    with committed_db.transaction() as session:
        finish_attempt(session, claim, at(1), "accepted", provider_message_id="wamid.REQ")
        record_accepted(session, claim, "wamid.REQ", at(1), unknown_attempts=0, had_unknown=False)
    failed = record(committed_db, incoming(world, "wamid.REQ", "failed", 2))
    assert apply_recorded(committed_db, failed, at(3)) == {"duplicate": 0, "applied": 1}

    with committed_db.transaction() as session:
        # The requeue has read what the provider may hold (nothing), and holds the row.
        requeue_message(session, claim.message_id, at(5), actor="ana")
        # A delivered for the old id arrives now: stored, and its statement, whose
        # snapshot still has the old cycle's id on the row, waits for the requeue.
        late = Background(
            lambda: record(committed_db, incoming(world, "wamid.REQ", "delivered", 4), 6)
        ).join()
        applying = Background(lambda: apply_recorded(committed_db, late, at(6)))
        wait_until_blocked_on_a_lock(committed_db)
    assert applying.join() == {"duplicate": 0, "stale": 1}

    message, events = rows(committed_db, claim.message_id)
    assert (message.status, message.cycle, message.provider_message_id) == ("queued", 2, None)
    assert message.delivered_at is None
    last = events[-1]
    assert (last.to_status, last.applied, last.refusal, last.cycle) == (
        "delivered",
        False,
        "stale",
        1,
    )
    (stored,) = late.to_apply
    row = status_row(committed_db, stored.id)
    assert (row.result, row.message_id) == ("stale", claim.message_id)


# A status racing the worker's one-statement acceptance ------------------------------------


def test_a_status_parked_while_the_worker_records_its_id_is_applied_by_the_next_sweep(
    app: Flask, committed_db: Database
) -> None:
    """The window the sweeper closes: the worker's statement looked for parked statuses
    before this one was stored, and the status looked for the provider id before the
    worker committed it. Neither sees the other; the replay applies it."""
    world: World = make_world(committed_db)
    claim = claimed(committed_db, world)
    with committed_db.transaction() as session:
        assert accept_at_once(
            session,
            claim,
            "wamid.CROSS",
            at(4),
            http_status=200,
            response_body="{}",
            unknown_attempts=0,
            had_unknown=False,
        )
        # The worker has not committed: the webhook arrives now, on its own connections.
        recorded = Background(
            lambda: record(committed_db, incoming(world, "wamid.CROSS", "delivered", 3), 5)
        ).join()
        assert Background(lambda: apply_recorded(committed_db, recorded, at(5))).join() == {
            "duplicate": 0,
            "parked": 1,
        }
    (stored,) = recorded.to_apply
    message, _ = rows(committed_db, claim.message_id)
    assert (message.status, message.provider_message_id) == ("sent", "wamid.CROSS")
    assert status_row(committed_db, stored.id).result == "parked"

    sweep_once(committed_db, app.config["RATCHET"], at(7))
    message, events = rows(committed_db, claim.message_id)
    assert (message.status, message.delivered_at, message.sent_at) == (
        "delivered",
        at(3),
        at(4),
    )
    assert [(e.to_status, e.applied) for e in events] == [("delivered", True)]
    row = status_row(committed_db, stored.id)
    assert (row.result, row.applied_at, row.tries) == ("applied", at(7), 2)
