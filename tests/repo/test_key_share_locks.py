"""A transaction writing an event for a message (which takes PostgreSQL's key-share lock on
the message row, for the foreign key) holds up no one who locks that row to update it:
every such lock is `FOR NO KEY UPDATE` (`app/repo/matching.py`).

Found by CI: a bulk cancel, refusing messages a drain had claimed, wrote a refusal event
for each. The drain recording their answers took each message `FOR UPDATE` to apply the
statuses parked for it, waited on the cancel's key-share lock, and the cancel's next
refusal waited on the drain's lock: a deadlock, and one side's work rolled back.

Each test keeps the event's transaction open while the other side runs with a lock
timeout: under `FOR UPDATE` that side waits and fails with LockNotAvailable."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.db import Database
from app.models import Message
from app.repo.accept_batch import accept_many
from app.repo.acceptance import record_accepted
from app.repo.cancels import cancel_message
from app.repo.claims import claim_batch
from app.repo.events import append_event
from app.repo.expiry import expire_due
from app.repo.status_apply import apply_matched_by_provider_id
from app.repo.template_holds import waiting_with_template

from ..factories import make_message, make_world
from ..views.dashboard_world import sent_message
from .acceptance_steps import (
    LEASE,
    T1,
    acceptance,
    claimed,
    deliver,
    impatient,
    status,
    stored,
)


def an_event_for(session: Session, message_id: int) -> None:
    """An event row for the message, flushed: its foreign key's key-share lock is held."""
    append_event(
        session,
        message_id=message_id,
        cycle=1,
        source="operator",
        kind="note",
        received_at=T1,
        applied=False,
        actor="ops@acme.test",
    )


def test_a_cancel_refusing_a_claimed_message_lets_the_drain_record_it_and_its_parked_status(
    committed_db: Database,
) -> None:
    db = committed_db
    world = make_world(db)
    claim = claimed(db, world, "15550000001")
    # Its `delivered` came before the provider's answer: parked, for the record to apply.
    assert deliver(db, status(world, "wamid.A", "delivered")) == {"duplicate": 0, "parked": 1}

    with db.transaction() as bulk:
        refused = cancel_message(
            bulk,
            claim.message_id,
            T1,
            actor="ops@acme.test (bulk #1)",
            reason="campaign sent by mistake",
            expected_cycle=1,
            audit=False,
            via="bulk #1",
        )
        assert not refused.canceled and refused.claimed  # its refusal event is written
        with impatient(db) as drain:
            answer = acceptance(claim, "wamid.A")
            assert accept_many(drain, [answer], T1) == {
                (claim.message_id, claim.cycle, claim.attempt)
            }
    with db.transaction() as session:
        message = session.get(Message, claim.message_id)
        assert message is not None
        assert (message.status, message.provider_message_id) == ("delivered", "wamid.A")


def test_an_event_being_written_holds_up_neither_a_webhook_nor_a_claim(
    committed_db: Database,
) -> None:
    db = committed_db
    world = make_world(db)
    sent = sent_message(db, world, "wamid.S")
    queued = make_message(db, world, recipient="15550000002")

    with db.transaction() as writer:
        for message_id in (sent, queued):
            an_event_for(writer, message_id)
        # The webhook's one statement (on PostgreSQL) locks the message by its provider id.
        read = stored(db, status(world, "wamid.S", "read")).to_apply[0]
        with impatient(db) as webhook:
            assert apply_matched_by_provider_id(webhook, read, T1) == "applied"
        # A drain skips locked rows: one held only by the event's key share is claimed.
        with impatient(db) as drain:
            claims = claim_batch(
                drain, world.identity_id, "campaign", 10, T1 + timedelta(minutes=5), LEASE
            )
            assert [c.message_id for c in claims] == [queued]


def test_an_event_being_written_holds_up_no_acceptance_expiry_hold_or_paced_claim(
    committed_db: Database,
) -> None:
    db = committed_db
    world = make_world(db, business_account_id="2000002")
    answered = claimed(db, world, "15550000004")
    expiring = make_message(db, world, recipient="15550000005")
    template = {"name": "order_update", "language": "en_US"}
    held = make_message(db, world, recipient="15550000006", template=template)
    paced = make_message(db, world, recipient="15550000007")
    with db.transaction() as session:
        session.execute(update(Message).where(Message.id == expiring).values(expires_at=T1))

    with db.transaction() as writer:
        for message_id in (answered.message_id, expiring, held, paced):
            an_event_for(writer, message_id)
        with impatient(db) as drain:  # one answer recorded on its own (`accept_at_once`)
            assert record_accepted(
                drain, answered, "wamid.B", T1, unknown_attempts=0, had_unknown=False
            )
        with impatient(db) as drain:
            assert expire_due(drain, world.identity_id, "campaign", T1) == [expiring]
        with impatient(db) as meta:  # a template paused: its waiting messages, locked
            waiting = waiting_with_template(
                meta, "2000002", "order_update", "en_US", [world.identity_id]
            )
            assert [w.message_id for w in waiting] == [held]
        with impatient(db) as drain:  # the oldest of each paced recipient's messages
            claims = claim_batch(
                drain, world.identity_id, "campaign", 10, T1, LEASE, one_each=["15550000007"]
            )
            assert paced in [c.message_id for c in claims]
