"""The usual acceptance is recorded in one statement on PostgreSQL (the attempt's answer,
the move to `sent` with its values, its event), and what it writes is exactly what the
general path (`finish_attempt`, then `record_accepted`) writes. Anything unusual (a
webhook got further, another id, a lost lease) changes nothing in that statement and goes
the general way; statuses parked for the id are looked up in a statement of their own,
under the row lock, and applied in the same transaction."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Config
from app.db import Database
from app.lifecycle import Source, Status
from app.models import Attempt, MessageEvent
from app.providers.base import SendResult
from app.repo.acceptance import accept_at_once, record_accepted
from app.repo.attempts import finish_attempt, start_attempt
from app.repo.claims import Claim, claim_message
from app.repo.inbox import IncomingStatus, store_delivery, store_statuses
from app.repo.messages import get_message
from app.repo.transitions import apply_status
from jobs.record import record_outcome

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_message, make_world
from .acceptance_writes import counted, written

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})
LEASE = timedelta(seconds=CONFIG.lease_seconds)
T1 = T0 + timedelta(seconds=2)


def claimed(db: Database, world: World, recipient: str) -> Claim:
    message_id = make_message(db, world, recipient=recipient)
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, f"key-{message_id}", T0)
    return claim


def accepted(wamid: str) -> SendResult:
    return SendResult(provider_message_id=wamid, http_status=200, response_body='{"ok":1}')


def accept_plainly(session: Session, claim: Claim, wamid: str, now: datetime) -> Any:
    """`accept_at_once` for a first attempt with no earlier unknown outcome."""
    return accept_at_once(
        session,
        claim,
        wamid,
        now,
        http_status=200,
        response_body=None,
        unknown_attempts=0,
        had_unknown=False,
    )


@pytest.mark.parametrize("had_unknown", [False, True])
def test_one_statement_writes_what_the_general_path_writes(db: Database, had_unknown: bool) -> None:
    world = make_world(db)
    fast, general = claimed(db, world, "15551230001"), claimed(db, world, "15551230002")
    counts = (2, 0, had_unknown)

    with counted(db) as statements, db.transaction() as session:
        outcome, _ = record_outcome(
            session, CONFIG, fast, accepted("wamid.FAST"), counts, T1, "campaign"
        )
    assert outcome == "accepted (sent)"
    # The statement, then the parked statuses looked up under its row lock (none here).
    assert len(statements) == 2, statements
    assert statements[1].lstrip().startswith("SELECT webhook_statuses.id"), statements

    with db.transaction() as session:
        finish_attempt(
            session,
            general,
            T1,
            "accepted",
            http_status=200,
            provider_message_id="wamid.GENERAL",
            response_body='{"ok":1}',
        )
        transition = record_accepted(
            session, general, "wamid.GENERAL", T1, unknown_attempts=2, had_unknown=had_unknown
        )
        assert transition is not None and transition.applied

    one, other = written(db, fast.message_id), written(db, general.message_id)
    assert one["provider_message_id"] == "wamid.FAST"
    assert other["provider_message_id"] == "wamid.GENERAL"
    # Created, claimed, accepted: only the last event differs, by the id it names.
    assert one["details"][:-1] == other["details"][:-1] and len(one["details"]) == 3
    assert one["details"][-1] == {"provider_message_id": "wamid.FAST"}
    assert other["details"][-1] == {"provider_message_id": "wamid.GENERAL"}
    for part in ("message", "attempts", "events"):
        assert one[part] == other[part], part
    assert one["message"]["status"] == "sent" and one["message"]["sent_at"] == T1
    assert one["message"]["had_unknown_outcome"] is had_unknown
    with db.transaction() as session:
        attempt = session.scalars(select(Attempt).where(Attempt.message_id == fast.message_id))
        assert next(attempt).provider_message_id == "wamid.FAST"


def test_a_status_parked_before_the_id_was_known_is_applied_with_the_acceptance(
    db: Database,
) -> None:
    world = make_world(db)
    claim = claimed(db, world, "15551230003")
    # `delivered` beat the send's answer: nothing knew wamid.P yet, so it parked.
    with db.transaction() as session:
        delivery = store_delivery(session, "whatsapp", world.identity_id, {}, "{}", T0)
        store_statuses(
            session,
            delivery,
            [
                IncomingStatus(
                    identity_id=world.identity_id,
                    routing_id="1000001",
                    provider="whatsapp",
                    provider_message_id="wamid.P",
                    status="delivered",
                    provider_time=T1,
                    raw={"id": "wamid.P", "status": "delivered"},
                )
            ],
            T0,
        )
    with db.transaction() as session:
        outcome, _ = record_outcome(
            session, CONFIG, claim, accepted("wamid.P"), (0, 0, False), T1, "campaign"
        )
    assert outcome == "accepted (sent)"
    with db.transaction() as session:
        message = get_message(session, claim.message_id)
        assert message is not None and message.status == "delivered"


def test_a_message_a_webhook_moved_first_is_left_to_the_general_path(db: Database) -> None:
    world = make_world(db)
    claim = claimed(db, world, "15551230004")
    with db.transaction() as session:
        # A `failed` webhook matched by correlation id got there before the answer.
        moved = apply_status(session, claim.message_id, Status.FAILED, Source.WEBHOOK, T1)
        assert moved.applied
    with db.transaction() as session:
        assert accept_plainly(session, claim, "wamid.W", T1) is None
        message = get_message(session, claim.message_id)
        assert message is not None
        assert (message.status, message.provider_message_id) == ("failed", None)
    # The general path then keeps the id and leaves the state where the webhook put it.
    with db.transaction() as session:
        outcome, _ = record_outcome(
            session, CONFIG, claim, accepted("wamid.W"), (0, 0, False), T1, "campaign"
        )
    assert outcome == "accepted (kept)"
    with db.transaction() as session:
        message = get_message(session, claim.message_id)
        assert message is not None
        assert (message.status, message.provider_message_id) == ("failed", "wamid.W")


def test_an_answer_for_a_lease_taken_over_moves_nothing_in_one_statement(db: Database) -> None:
    world = make_world(db)
    claim = claimed(db, world, "15551230005")
    # The lease lapsed and another worker re-claimed: attempt 2 holds the message now.
    later = T0 + LEASE + timedelta(seconds=1)
    with db.transaction() as session:
        again = claim_message(session, claim.message_id, later, LEASE)
        assert again is not None and again.attempt == claim.attempt + 1
        assert accept_plainly(session, claim, "wamid.L", later) is None
        message = get_message(session, claim.message_id)
        assert message is not None
        assert (message.status, message.attempt, message.lease_until) == (
            "sending",
            again.attempt,
            later + LEASE,
        )
        events = session.scalars(
            select(MessageEvent.kind).where(MessageEvent.message_id == claim.message_id)
        ).all()
        assert "accepted" not in events
        # Nor is the attempt's answer written: it goes with the move or not at all (the
        # general path writes it), so the attempt row is never locked before the message.
        ours = session.scalars(
            select(Attempt).where(
                Attempt.message_id == claim.message_id, Attempt.number == claim.attempt
            )
        ).one()
        assert (ours.finished_at, ours.outcome, ours.provider_message_id) == (None, None, None)
