"""The sweeper's replay takes at most 500 pending statuses a pass, and recently parked ones
count among them. Statuses for a shared number's other senders (the WhatsApp Business app
on the same number, another system: "unknown ids are normal") park and are retried for ten
minutes; however many there are, a status that was never applied (its web process died
after committing the delivery) goes first (DESIGN section 2; section 6). Here that status
is the `sent` answering an unknown outcome, so it must beat the retry: promise 1."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from flask import Flask

from app.db import Database
from app.reconcile import Recorded, apply_recorded, record_delivery
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.failures import record_retry
from app.repo.inbox import IncomingStatus, pending_status_ids
from app.repo.messages import correlation_id_for
from jobs.sweep import sweep_once

from ..conftest import T0
from ..factories import World, make_message, make_world

LEASE = timedelta(seconds=25)
WINDOW = timedelta(minutes=10)


def record_foreign(db: Database, world: World, wamids: list[str], now: datetime) -> Recorded:
    """A committed delivery of `delivered` statuses for messages another sender on this
    number sent (the Business app, another system): no message of ours has those ids."""
    statuses = [
        IncomingStatus(
            identity_id=world.identity_id,
            provider="whatsapp",
            provider_message_id=wamid,
            status="delivered",
            provider_time=now,
            routing_id="1000001",
        )
        for wamid in wamids
    ]
    with db.transaction() as session:
        return record_delivery(
            session,
            provider="whatsapp",
            identity_id=world.identity_id,
            headers={},
            body="{}",
            now=now,
            statuses=statuses,
        )


@pytest.mark.parametrize("parked", [10, 500])  # 10: the control, which passes
def test_a_status_left_unapplied_is_replayed_even_with_many_parked_ones_older(
    app: Flask, db: Database, parked: int
) -> None:
    world = make_world(db)
    config = app.config["RATCHET"]

    # The last minutes: 500 statuses of messages the Business app sent from this number.
    now = T0
    recorded = record_foreign(db, world, [f"wamid.APP{i:05d}" for i in range(parked)], now)
    assert apply_recorded(db, recorded, now).get("parked") == parked

    # Our message: the call timed out (an unknown outcome), a retry after the grace.
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, now, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", now)
        assert record_retry(
            session,
            claim,
            now + timedelta(seconds=15),
            failure_class="unknown",
            error=None,
            unknown_attempts=1,
            rate_limited_attempts=0,
            had_unknown=True,
        )
        correlation = correlation_id_for(session, message_id, 1)
    # Meta's `sent` for it arrives; the web process is restarted (a deploy) after the
    # delivery committed and before it applied: the sweeper's to replay.
    with db.transaction() as session:
        record_delivery(
            session,
            provider="whatsapp",
            identity_id=world.identity_id,
            headers={},
            body="{}",
            now=now + timedelta(seconds=1),
            statuses=[
                IncomingStatus(
                    identity_id=world.identity_id,
                    provider="whatsapp",
                    provider_message_id="wamid.OURS",
                    status="sent",
                    provider_time=now + timedelta(seconds=1),
                    correlation_id=correlation,
                    routing_id="1000001",
                )
            ],
        )

    # Six sweeper passes (12 s), all before the retry is due.
    for second in range(2, 14, 2):
        sweep_once(db, config, now + timedelta(seconds=second))

    with db.transaction() as session:
        retry = claim_message(session, message_id, now + timedelta(seconds=16), LEASE)
    assert retry is None, (
        "the retry was claimed (a second send to Meta) although Meta's `sent` for the "
        "first copy had been stored 15 s earlier: six sweeper passes replayed only the "
        "500 older parked statuses"
    )


def test_the_newest_parked_statuses_are_replayed_first_when_more_are_parked_than_a_pass_takes(
    db: Database,
) -> None:
    """A status that raced its send's record parks for a moment; it is among the newest.
    With more of other senders' statuses parked in the window than a pass replays (here 5
    of 10 older ones, 500 in production), oldest first never reached it (found by review)."""
    world = make_world(db)

    def park(wamid: str, at: timedelta) -> list[int]:
        recorded = record_foreign(db, world, [wamid], T0 + at)
        assert apply_recorded(db, recorded, T0 + at).get("parked") == 1
        return [status.id for status in recorded.to_apply]

    foreign = [park(f"wamid.APP{i:03d}", timedelta(seconds=i))[0] for i in range(10)]
    (ours,) = park("wamid.RACED", timedelta(seconds=30))
    with db.transaction() as session:
        pending = pending_status_ids(session, T0 + timedelta(minutes=1), WINDOW, limit=5)
    assert pending[0] == ours and len(pending) == 5
    assert set(pending[1:]) <= set(foreign)
