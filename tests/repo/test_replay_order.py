"""The sweeper's replay takes at most 500 pending statuses a pass, and recently parked ones
count among them. Statuses for a shared number's other senders (the WhatsApp Business app
on the same number, another system: "unknown ids are normal") park and are retried for ten
minutes; however many there are, a status that was never applied (its web process died
after committing the delivery) goes first (DESIGN section 2; section 6). Here that status
is the `sent` answering an unknown outcome, so it must beat the retry: promise 1."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask

from app.db import Database
from app.reconcile import apply_recorded, record_delivery
from app.repo.claims import claim_message
from app.repo.inbox import IncomingStatus
from app.repo.messages import correlation_id_for
from app.repo.sending import record_retry, start_attempt
from jobs.sweep import sweep_once

from ..conftest import T0
from ..factories import make_message, make_world

LEASE = timedelta(seconds=25)


@pytest.mark.parametrize("parked", [10, 500])  # 10: the control, which passes
def test_a_status_left_unapplied_is_replayed_even_with_many_parked_ones_older(
    app: Flask, db: Database, parked: int
) -> None:
    world = make_world(db)
    config = app.config["RATCHET"]

    # The last minutes: 500 statuses of messages the Business app sent from this number.
    now = T0
    foreign = [
        IncomingStatus(
            identity_id=world.identity_id,
            provider="whatsapp",
            provider_message_id=f"wamid.APP{i:05d}",
            status="delivered",
            provider_time=now,
            routing_id="1000001",
        )
        for i in range(parked)
    ]
    with db.transaction() as session:
        recorded = record_delivery(
            session,
            provider="whatsapp",
            identity_id=world.identity_id,
            headers={},
            body="{}",
            now=now,
            statuses=foreign,
        )
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
