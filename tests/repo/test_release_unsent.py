"""A stood-down attempt gives its message back only while its lease is still its own
(`release_unsent`, fenced on the attempt and cycle), and never rewrites what a re-claim
recorded of it."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.db import Database
from app.models import Attempt, Message
from app.repo.attempts import mark_lost_attempt, start_attempt
from app.repo.claims import claim_message
from app.repo.give_back import release_unsent

from ..conftest import T0
from ..factories import make_message, make_world

LEASE = timedelta(seconds=25)


def outcomes(db: Database, message_id: int) -> list[tuple[int, str | None]]:
    with db.transaction() as session:
        return [
            (a.number, a.outcome)
            for a in session.scalars(
                select(Attempt).where(Attempt.message_id == message_id).order_by(Attempt.number)
            )
        ]


def test_a_stood_down_attempt_whose_lease_is_its_own_gives_the_message_back(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", T0)
    with db.transaction() as session:
        assert release_unsent(session, claim, T0 + timedelta(seconds=11))
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        assert (row.status, row.next_attempt_at, row.lease_until) == (
            "sending",
            T0 + timedelta(seconds=11),
            None,
        )
        assert (row.unknown_attempts, row.had_unknown_outcome) == (0, False)
        # Due again at once, claimed as an ordinary retry, not a lost lease.
        again = claim_message(session, message_id, T0 + timedelta(seconds=11), LEASE)
        assert again is not None and not again.lease_lost and again.attempt == 2
    assert outcomes(db, message_id) == [(1, "stood_down")]


def test_a_stood_down_attempt_whose_lease_was_re_claimed_changes_nothing(db: Database) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        first = claim_message(session, message_id, T0, LEASE)
        assert first is not None
        start_attempt(session, first, "key", T0)
    # The first worker was paused past its lease: another re-claims (a lost lease).
    later = T0 + LEASE + timedelta(seconds=1)
    with db.transaction() as session:
        second = claim_message(session, message_id, later, LEASE)
        assert second is not None and second.lease_lost
        mark_lost_attempt(session, second, later)
    # The first wakes and stands down: not its lease any more.
    with db.transaction() as session:
        assert not release_unsent(session, first, later + timedelta(seconds=1))
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None and row.attempt == 2 and row.lease_until is not None
    # What the re-claim recorded of attempt 1 stays (found by review: it became stood_down).
    assert outcomes(db, message_id) == [(1, "unknown")]
