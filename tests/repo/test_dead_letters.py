"""The dead-letter list orders actionable-first in SQL, so a LIMIT never cuts the ones a
person can act on behind newer failures they cannot."""

from __future__ import annotations

from datetime import timedelta

from app.db import Database
from app.repo.claims import claim_message
from app.repo.failures import record_failed
from app.repo.queue import dead_letters

from ..conftest import T0
from ..factories import World, make_message, make_world

LEASE = timedelta(seconds=25)


def fail(db: Database, world: World, failure_class: str, code: int | None, minute: int) -> int:
    when = T0 + timedelta(minutes=minute)
    message_id = make_message(db, world, now=when)
    with db.transaction() as session:
        claim = claim_message(session, message_id, when, LEASE)
        assert claim is not None
        record_failed(
            session,
            claim,
            when,
            failure_class=failure_class,
            error={"provider": "whatsapp", "code": code},
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
    return message_id


def test_older_actionable_dead_letters_come_before_newer_permanent_ones_under_a_limit(
    db: Database,
) -> None:
    world = make_world(db)
    exhausted = fail(db, world, "exhausted", 131000, minute=0)
    template = fail(db, world, "needs_human", 132001, minute=1)
    window = fail(db, world, "permanent", 131047, minute=2)
    for minute in range(3, 13):  # ten newer failures nobody can fix by retrying
        fail(db, world, "permanent", 131026, minute=minute)
    with db.transaction() as session:
        first = [letter.message_id for letter in dead_letters(session, limit=3)]
    assert first == [exhausted, template, window]


def test_within_one_rank_the_newest_dead_letter_comes_first(db: Database) -> None:
    world = make_world(db)
    older = fail(db, world, "permanent", 131026, minute=0)
    newer = fail(db, world, "permanent", 131026, minute=5)
    with db.transaction() as session:
        assert [d.message_id for d in dead_letters(session)] == [newer, older]
