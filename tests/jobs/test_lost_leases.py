"""Workers that die mid-call, one after another, and a pause racing a resume: nothing sends
without limit and nothing is left where no one will pick it up."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.config import Config
from app.crypto import SecretBox
from app.db import Database
from app.lifecycle import Source, Status
from app.models import Attempt, Message
from app.repo.claims import claim_message
from app.repo.give_back import record_held
from app.repo.identities import pause_identity, resume_identity
from app.repo.requeues import RequeueRefusedError, requeue_message
from app.repo.transitions import apply_status
from jobs.send import send_one

from ..conftest import SECRET_KEY, T0
from ..factories import make_message, make_world

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})
LEASE = timedelta(seconds=CONFIG.lease_seconds)


def test_workers_dying_after_every_claim_still_reach_the_unknown_cap(db: Database) -> None:
    message_id = make_message(db, make_world(db))
    now = T0
    with db.transaction() as session:
        assert claim_message(session, message_id, now, LEASE) is not None
    # Each later worker finds the previous lease expired and dies before recording.
    for lost in range(1, CONFIG.cap_unknown):
        now += LEASE + timedelta(seconds=1)
        with db.transaction() as session:
            claim = claim_message(session, message_id, now, LEASE)
            assert claim is not None and claim.lease_lost
        with db.transaction() as session:
            row = session.get(Message, message_id, populate_existing=True)
            assert row is not None and row.unknown_attempts == lost and row.had_unknown_outcome
    # The next re-claim counts the fifth lost attempt: no call (the lost one may have
    # reached the provider moments ago), and the verdict waits the webhook grace.
    now += LEASE + timedelta(seconds=1)
    outcome, ring = send_one(db, SecretBox(SECRET_KEY), CONFIG, message_id, lambda: now)
    grace = now + timedelta(seconds=CONFIG.webhook_grace)
    assert outcome.startswith(f"exhausted at {grace.isoformat()}") and ring is not None
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        assert (row.status, row.pending_verdict, row.unknown_attempts) == (
            "sending",
            "exhausted",
            5,
        )
    later = grace + timedelta(seconds=1)
    outcome, ring = send_one(db, SecretBox(SECRET_KEY), CONFIG, message_id, lambda: later)
    assert (outcome, ring) == ("failed: exhausted (after the webhook grace)", None)
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        assert (row.status, row.failure_class, row.unknown_attempts) == ("failed", "exhausted", 5)
        assert row.last_error is not None and "lease expired" in row.last_error["message"]


def test_a_re_claim_after_a_lost_lease_makes_no_call_and_waits_the_webhook_grace(
    db: Database,
) -> None:
    """The lost call may have been accepted moments before the lease ran out (a worker may
    start it until `lease - deadline - margin`): sending again at once could double-text."""
    message_id = make_message(db, make_world(db))
    with db.transaction() as session:
        assert claim_message(session, message_id, T0, LEASE) is not None
    now = T0 + LEASE + timedelta(seconds=1)
    # The identity's base URL is unreachable: a call would come back `unknown` at once.
    outcome, ring = send_one(db, SecretBox(SECRET_KEY), CONFIG, message_id, lambda: now)
    assert outcome.startswith("retry at") and "lease expired unanswered" in outcome
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None and row.next_attempt_at is not None
        assert row.next_attempt_at >= now + timedelta(seconds=CONFIG.webhook_grace)
        attempts = session.scalars(select(Attempt).where(Attempt.message_id == message_id)).all()
    assert attempts == []  # no request left for the re-claim
    assert ring == ("campaign", row.next_attempt_at)


def test_a_held_message_left_behind_by_a_pause_racing_a_resume_is_due_again(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        # The resume ran first (nothing to release yet), then the hold committed.
        record_held(session, claim, T0, error={"code": 190}, reason="code 190")
        resume_identity(session, world.identity_id, T0)
    with db.transaction() as session:
        again = claim_message(session, message_id, T0 + timedelta(seconds=1), LEASE)
    assert again is not None and again.attempt == 2 and not again.lease_lost


def test_a_paused_identitys_held_message_is_not_due(db: Database) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        record_held(session, claim, T0, error={"code": 190}, reason="code 190")
        assert not pause_identity(session, world.identity_id, "again", T0)  # already paused
    with db.transaction() as session:
        assert claim_message(session, message_id, T0 + timedelta(hours=1), LEASE) is None


def test_requeue_waits_for_an_attempt_still_in_flight(db: Database) -> None:
    message_id = make_message(db, make_world(db))
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        # A `failed` webhook lands while the attempt is still out.
        apply_status(
            session,
            message_id,
            Status.FAILED,
            Source.WEBHOOK,
            T0,
            extra_values={"failure_class": "permanent"},
        )
    with db.transaction() as session, pytest.raises(RequeueRefusedError, match="in flight"):
        requeue_message(session, message_id, T0 + timedelta(seconds=1), actor="ana")
    with db.transaction() as session:
        message = requeue_message(
            session, message_id, T0 + LEASE + timedelta(seconds=1), actor="ana"
        )
    assert message.cycle == 2
