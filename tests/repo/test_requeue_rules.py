"""Requeue must not double-text: refused when the provider may hold a deliverable copy, and
decided on the same row it changes (on real PostgreSQL, the interleaving forced)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select

from app.db import Database
from app.models import Message, MessageEvent
from app.repo.acceptance import record_accepted
from app.repo.attempts import finish_attempt, start_attempt
from app.repo.claims import Claim, claim_message
from app.repo.failures import record_retry, take_verdict
from app.repo.inbox import IncomingStatus, store_delivery, store_statuses
from app.repo.requeues import RequeueRefusedError, requeue_message
from app.repo.status_apply import apply_webhook_status

from ..conftest import at
from ..factories import World, make_message, make_world

LEASE = timedelta(seconds=25)


def claim(database: Database, message_id: int, when) -> Claim:
    with database.transaction() as session:
        taken = claim_message(session, message_id, when, LEASE)
        assert taken is not None
        start_attempt(session, taken, "key", when)
        return taken


def webhook(database: Database, world: World, wamid: str, word: str, when, **kw: Any) -> str:
    status = IncomingStatus(
        identity_id=world.identity_id,
        provider="whatsapp",
        provider_message_id=wamid,
        status=word,
        provider_time=when,
        **kw,
    )
    with database.transaction() as session:
        delivery = store_delivery(session, "whatsapp", world.identity_id, {}, "{}", when)
        (status_id,), _ = store_statuses(session, delivery, [status], when)
    with database.transaction() as session:
        return apply_webhook_status(session, status_id, when)


def correlation_of(database: Database, message_id: int) -> str:
    with database.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None and row.correlation_id
        return row.correlation_id


def accepted(database: Database, taken: Claim, wamid: str, when, **kw: Any) -> None:
    with database.transaction() as session:
        finish_attempt(session, taken, when, "accepted", provider_message_id=wamid)
        record_accepted(
            session,
            taken,
            wamid,
            when,
            unknown_attempts=kw.get("unknown", 0),
            had_unknown=kw.get("had_unknown", False),
        )


def failed_after_a_second_copy(database: Database, world: World) -> int:
    """Attempt 1 times out; attempt 2 is in flight when a `failed` webhook for attempt 1's
    id fails the message; attempt 2 then answers 200 with a second id."""
    message_id = make_message(database, world)
    correlation = correlation_of(database, message_id)
    first = claim(database, message_id, at(0))
    with database.transaction() as session:
        finish_attempt(session, first, at(10), "unknown")
        record_retry(
            session,
            first,
            at(25),
            failure_class="unknown",
            error={"message": "timed out"},
            unknown_attempts=1,
            rate_limited_attempts=0,
            had_unknown=True,
        )
    second = claim(database, message_id, at(26))
    error = {"code": 131026, "title": "Message undeliverable"}
    assert (
        webhook(
            database,
            world,
            "wamid.ONE",
            "failed",
            at(27),
            correlation_id=correlation,
            errors=(error,),
            failure_class="permanent",
        )
        == "applied"
    )
    accepted(database, second, "wamid.TWO", at(28), unknown=1, had_unknown=True)
    return message_id


def test_requeue_is_refused_when_a_second_copy_was_accepted_and_never_failed(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = failed_after_a_second_copy(db, world)
    with db.transaction() as session:
        events = session.scalars(
            select(MessageEvent.kind).where(MessageEvent.message_id == message_id)
        ).all()
    assert "double_send" in events
    with pytest.raises(RequeueRefusedError) as refused, db.transaction() as session:
        requeue_message(session, message_id, at(60), actor="ana")
    # The refusal names what it found.
    assert "wamid.TWO" in str(refused.value) and "never reported failed" in str(refused.value)
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None and (row.status, row.cycle) == ("failed", 1)


def test_a_forced_requeue_of_a_held_message_goes_ahead_and_records_what_was_found(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = failed_after_a_second_copy(db, world)
    with pytest.raises(RequeueRefusedError, match="needs a reason"), db.transaction() as s:
        requeue_message(s, message_id, at(60), actor="ana", force=True)
    with db.transaction() as session:
        row = requeue_message(
            session, message_id, at(60), actor="ana", force=True, reason="customer asked"
        )
        assert (row.status, row.cycle) == ("queued", 2)
        requeue = session.scalars(
            select(MessageEvent).where(
                MessageEvent.message_id == message_id, MessageEvent.kind == "requeue"
            )
        ).one()
    assert requeue.detail is not None
    assert requeue.detail["forced"] is True and "wamid.TWO" in requeue.detail["held"]


def test_a_message_accepted_then_reported_failed_is_requeued_as_an_ordinary_new_send(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    taken = claim(db, message_id, at(0))
    accepted(db, taken, "wamid.ECO", at(1))
    error = {"code": 131049, "title": "healthy ecosystem"}
    failed = webhook(db, world, "wamid.ECO", "failed", at(2), errors=(error,))
    assert failed == "applied"
    with db.transaction() as session:
        row = requeue_message(session, message_id, at(60), actor="ana")
        # Only definite answers in the failed cycle: the new cycle's own provider key.
        assert (row.status, row.cycle, row.provider_key_cycle) == ("queued", 2, 2)


def test_requeue_is_refused_when_the_phone_reported_the_message_after_it_failed(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    taken = claim(db, message_id, at(0))
    accepted(db, taken, "wamid.LATE", at(1))
    assert webhook(db, world, "wamid.LATE", "failed", at(2), errors=({"code": 131049},))
    assert webhook(db, world, "wamid.LATE", "delivered", at(3)) == "refused"
    with pytest.raises(RequeueRefusedError, match="reported delivered"), db.transaction() as s:
        requeue_message(s, message_id, at(60), actor="ana")


@pytest.mark.parametrize("run", range(3))
def test_a_delivered_committed_during_a_requeue_cannot_slip_between_its_check_and_update(
    committed_db: Database, run: int
) -> None:
    """The `delivered` is delivered on another connection at the moment the requeue is
    about to write. Either the requeue sees it and refuses, or the webhook waits for the
    requeue's commit and lands as an earlier cycle's status: never both a requeue and a
    refused `delivered` of the cycle it left behind."""
    world = make_world(committed_db)
    message_id = make_message(committed_db, world)
    taken = claim(committed_db, message_id, at(0))
    accepted(committed_db, taken, f"wamid.R{run}", at(1))
    assert webhook(committed_db, world, f"wamid.R{run}", "failed", at(2), errors=({"code": 1},))

    results: dict[str, Any] = {}
    main = threading.current_thread()
    fired = threading.Event()

    def deliver_late() -> None:
        results["webhook"] = webhook(committed_db, world, f"wamid.R{run}", "delivered", at(3))

    def before_write(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # The requeue's first write, right after its check: let the webhook in now, on its
        # own connection. (Any write after this one holds a lock through its foreign key.)
        if (
            threading.current_thread() is main
            and not fired.is_set()
            and statement.lstrip().upper().startswith("INSERT INTO MESSAGE_EVENTS")
        ):
            fired.set()
            worker = threading.Thread(target=deliver_late)
            worker.start()
            worker.join(timeout=2.0)  # blocked on our row lock if the requeue holds one
            results["worker"] = worker

    event.listen(committed_db.engine, "before_cursor_execute", before_write)
    try:
        with committed_db.transaction() as session:
            requeue_message(session, message_id, at(60), actor="ana")
        results["requeue"] = "applied"
    except RequeueRefusedError as exc:
        results["requeue"] = str(exc)
    finally:
        event.remove(committed_db.engine, "before_cursor_execute", before_write)
    results["worker"].join(timeout=10)
    assert fired.is_set() and not results["worker"].is_alive()

    with committed_db.transaction() as session:
        refused_delivered = session.scalars(
            select(MessageEvent).where(
                MessageEvent.message_id == message_id,
                MessageEvent.cycle == 1,
                MessageEvent.to_status == "delivered",
                MessageEvent.refusal == "failed_is_final",
            )
        ).all()
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
    if results["requeue"] == "applied":
        assert refused_delivered == [], "requeued although the phone reported it first"
        assert results["webhook"] == "stale" and row.cycle == 2
    else:
        assert "delivered" in results["requeue"] and row.cycle == 1


def test_a_second_requeue_is_refused_when_an_earlier_cycles_copy_reached_the_phone(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    cycle1_correlation = correlation_of(db, message_id)

    # Cycle 1: the last allowed unknown outcome (cap 1 here for brevity: the verdict path),
    # the provider actually accepted it as wamid.A, its webhooks are late.
    first = claim(db, message_id, at(0))
    with db.transaction() as session:
        finish_attempt(session, first, at(10), "unknown")
        assert record_retry(
            session,
            first,
            at(25),
            failure_class="unknown",
            error={"message": "timed out"},
            unknown_attempts=5,
            rate_limited_attempts=0,
            had_unknown=True,
            verdict="exhausted",
        )
    with db.transaction() as session:
        verdict = take_verdict(session, message_id, at(26))
        assert verdict is not None and verdict.applied
    # Nothing known about wamid.A yet: the first requeue is (rightly) allowed.
    with db.transaction() as session:
        requeue_message(session, message_id, at(60), actor="ana")

    # Cycle 2: accepted as wamid.B, which the provider then fails (131049).
    second = claim(db, message_id, at(61))
    accepted(db, second, "wamid.B", at(62))
    assert webhook(db, world, "wamid.B", "failed", at(63), errors=({"code": 131049},)) == "applied"

    # Cycle 1's copy reports in: sent, delivered and read on the customer's phone.
    for word, t in (("sent", 64), ("delivered", 65), ("read", 66)):
        result = webhook(db, world, "wamid.A", word, at(t), correlation_id=cycle1_correlation)
        assert result == "stale"  # recorded for cycle 1, not applied to cycle 2

    # The customer has read the message (cycle 1's copy). A second requeue must not
    # text them again without --force.
    with (
        pytest.raises(RequeueRefusedError, match="reported read in cycle 1"),
        db.transaction() as s,
    ):
        requeue_message(s, message_id, at(120), actor="ana")
