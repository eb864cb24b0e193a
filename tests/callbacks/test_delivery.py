"""Delivering callbacks to a receiver that fails, times out, answers slowly, is down for a
while, answers 410, or sends a body without end: each change arrives exactly once after
the receiver's deduplication by `webhook-id`, every signature verifies with the
`standardwebhooks` reference library, and a message's sequence never goes back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from flask import Flask
from sqlalchemy import select

from app.callback_models import DELIVERED, GAVE_UP, PENDING, CallbackAttempt
from app.db import Database
from app.repo import callback_outbox as outbox_repo
from app.repo.callback_endpoints import delete_endpoint, get_endpoint, update_endpoint
from jobs.callbacks import deliver_due

from ..factories import World, make_world
from .conftest import (
    BOX,
    add_endpoint,
    at,
    delivered_message,
    endpoint_row,
    failed_message,
    outbox,
    run_until_settled,
    with_config,
)
from .receiver import Receiver


@pytest.fixture
def world(committed_db: Database) -> World:
    return make_world(committed_db)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(hang_seconds=1.5).start()
    yield made
    made.stop()


def sequences_by_message(applied: list[dict]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for body in applied:
        found.setdefault(body["data"]["message_id"], []).append(body["data"]["sequence"])
    return found


def test_every_change_arrives_once_verified_and_in_order_through_failures_and_timeouts(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    db = committed_db
    receiver.script = [500, "slow", "hang", (503, {"Retry-After": "120"}), "redirect", 502, "hang"]
    endpoint_id = add_endpoint(db, world, receiver)
    first = delivered_message(db, world, "wamid.D1")
    second = failed_message(db, world)
    third = delivered_message(db, world, "wamid.D3")
    run_until_settled(db, app.config["RATCHET"], endpoint_id, at(10))

    rows = outbox(db, endpoint_id)
    assert len(rows) == 7 and {row.state for row in rows} == {DELIVERED}
    assert all(seen.verified for seen in receiver.seen)
    applied = receiver.applied_in_order()
    assert sorted(receiver.applied) == sorted(f"cb_{row.id}" for row in rows)  # once each
    assert len(receiver.seen) > len(applied)  # retries happened, and were deduplicated
    by_message = sequences_by_message(applied)
    assert by_message == {first: [1, 2, 3], second: [1], third: [1, 2, 3]}
    failed = next(b for b in applied if b["data"]["message_id"] == second)
    assert failed["type"] == "message.failed"
    assert failed["data"]["error"]["message"] == "Message Undeliverable."
    # The 503's Retry-After (120 s) was waited for, beyond the backoff of a few seconds.
    with db.transaction() as session:
        attempts = list(session.scalars(select(CallbackAttempt).order_by(CallbackAttempt.id)))
    after_503 = next(a for a in attempts if a.http_status == 503)
    again = next(
        a
        for a in attempts
        if a.callback_id == after_503.callback_id and a.attempted_at > after_503.attempted_at
    )
    assert again.attempted_at - after_503.attempted_at >= timedelta(seconds=120)
    assert [a.http_status for a in attempts if a.http_status == 302] == [302]  # not followed


def test_a_receiver_down_for_a_while_gets_everything_when_it_is_back(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    db = committed_db
    endpoint_id = add_endpoint(db, world, receiver)
    receiver.stop()
    message_id = delivered_message(db, world, "wamid.D4")
    config = app.config["RATCHET"]
    now = at(10)
    for _ in range(4):  # down: every attempt is refused
        deliver_due(db, BOX, config, endpoint_id, lambda t=now: t)
        now = max(c.next_attempt_at for c in outbox(db)) + timedelta(milliseconds=1)
    rows = outbox(db)
    assert all(c.state == PENDING for c in rows)
    # Only the message's first change was tried: the others wait behind it, in order.
    assert [c.attempts for c in rows] == [4, 0, 0]
    assert receiver.seen == []
    receiver.start()  # back, on the same port
    run_until_settled(db, config, endpoint_id, now)
    assert sequences_by_message(receiver.applied_in_order()) == {message_id: [1, 2, 3]}


def test_a_410_disables_the_endpoint_and_enabling_it_replays_the_pile_in_order(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    db = committed_db
    receiver.script = [410]
    endpoint_id = add_endpoint(db, world, receiver)
    message_id = delivered_message(db, world, "wamid.D5")
    config = app.config["RATCHET"]
    run_until_settled(db, config, endpoint_id, at(10))
    endpoint = endpoint_row(db, endpoint_id)
    assert not endpoint.enabled and endpoint.disabled_reason.startswith("gone")
    later = delivered_message(db, world, "wamid.D6")  # piles up while disabled
    deliver_due(db, BOX, config, endpoint_id, lambda: at(3600))
    assert len(receiver.seen) == 1
    with db.transaction() as session:
        row = get_endpoint(session, world.tenant_id, endpoint_id)
        assert row is not None
        update_endpoint(session, row, at(7200), enabled=True)
    run_until_settled(db, config, endpoint_id, at(7200))
    assert sequences_by_message(receiver.applied_in_order()) == {
        message_id: [1, 2, 3],
        later: [1, 2, 3],
    }


def test_a_run_of_failures_disables_the_endpoint_and_a_day_of_them_gives_a_callback_up(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    db = committed_db
    receiver.script = [500] * 100
    endpoint_id = add_endpoint(db, world, receiver)
    delivered_message(db, world, "wamid.D7")
    run_until_settled(db, with_config(app, callback_disable_after=5), endpoint_id, at(10))
    endpoint = endpoint_row(db, endpoint_id)
    assert not endpoint.enabled and endpoint.disabled_reason.startswith("failing: 5")
    with db.transaction() as session:
        row = get_endpoint(session, None, endpoint_id)
        assert row is not None
        update_endpoint(session, row, at(20), enabled=True)
    patient = with_config(app, callback_disable_after=1000)
    run_until_settled(db, patient, endpoint_id, at(20), limit=200)
    rows = outbox(db, endpoint_id)
    # Retried with backoff (5 s doubling to an hour, jittered) for a day after its change,
    # then given up; the later changes in what was left of their own day.
    assert [row.state for row in rows] == [GAVE_UP] * 3
    assert 20 <= rows[0].attempts <= 40
    for row in rows:
        with db.transaction() as session:
            query = select(CallbackAttempt.attempted_at).where(
                CallbackAttempt.callback_id == row.id
            )
            tries = list(session.scalars(query))
        assert len(tries) == row.attempts and max(tries) - row.created_at < timedelta(days=1)


def test_a_body_without_end_is_cut_and_kept_short(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    db = committed_db
    receiver.script = ["huge"]
    endpoint_id = add_endpoint(db, world, receiver)
    delivered_message(db, world, "wamid.D8")
    run_until_settled(db, app.config["RATCHET"], endpoint_id, at(10))
    with db.transaction() as session:
        first = session.scalars(select(CallbackAttempt).order_by(CallbackAttempt.id)).first()
    assert first is not None and first.http_status == 200
    assert first.response_body is not None and len(first.response_body) == 1024
    assert {row.state for row in outbox(db)} == {DELIVERED}


def test_another_tenants_endpoint_never_receives_this_tenants_callbacks(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    db = committed_db
    other_world = make_world(db, name="other", account_id="2000002")
    other = Receiver().start()
    try:
        mine = add_endpoint(db, world, receiver)
        theirs = add_endpoint(db, other_world, other)
        message_id = delivered_message(db, world, "wamid.D9")
        config = app.config["RATCHET"]
        run_until_settled(db, config, mine, at(10))
        run_until_settled(db, config, theirs, at(10))
        assert sequences_by_message(receiver.applied_in_order()) == {message_id: [1, 2, 3]}
        assert other.seen == []
    finally:
        other.stop()


def test_an_endpoint_deleted_while_its_callback_is_in_flight_leaves_the_record_nothing_to_do(
    app: Flask, committed_db: Database, world: World, receiver: Receiver
) -> None:
    """Found by bench/callbacks.py: the record of a POST whose endpoint was deleted
    meanwhile failed on the attempt's foreign key, and the drain died."""
    db = committed_db
    endpoint_id = add_endpoint(db, world, receiver)
    delivered_message(db, world, "wamid.D10")
    with db.transaction() as session:
        (claimed, *_) = outbox_repo.claim_due(session, endpoint_id, at(10), 4, timedelta(1))
    with db.transaction() as session:
        row = get_endpoint(session, None, endpoint_id)
        assert row is not None
        delete_endpoint(session, row)
    with db.transaction() as session:
        recorded = outbox_repo.record_answer(
            session,
            claimed,
            endpoint_id,
            outbox_repo.Answer(200, 5, "ok"),
            at(11),
            retry_window=timedelta(days=1),
            disable_after=50,
        )
    assert recorded.stale and outbox(db) == []
