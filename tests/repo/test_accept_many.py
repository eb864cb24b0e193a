"""A drain's batch of acceptances is recorded in two statements on PostgreSQL (the moves,
attempts and events of all; then the statuses parked for the new ids), and each message
ends exactly as `accept_at_once` leaves it alone. A message that one statement would not
move (a webhook got further, a lease taken over, another id) is left untouched for the
general path, and the others of its batch are recorded all the same."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.db import Database
from app.lifecycle import Source, Status
from app.models import Attempt, MessageEvent
from app.repo.accept_batch import accept_many
from app.repo.acceptance import accept_at_once
from app.repo.claims import Claim, claim_message
from app.repo.inbox import IncomingStatus, store_delivery, store_statuses
from app.repo.messages import get_message
from app.repo.transitions import apply_status

from ..conftest import T0
from ..factories import World, make_world
from .acceptance_steps import LEASE, acceptance, claimed
from .acceptance_writes import counted, written

T1 = T0 + timedelta(seconds=2)


def parked_delivered(db: Database, world: World, wamid: str) -> None:
    """`delivered` for `wamid` beat the send's answer: it parked."""
    with db.transaction() as session:
        delivery = store_delivery(session, "whatsapp", world.identity_id, {}, "{}", T0)
        status = IncomingStatus(
            identity_id=world.identity_id,
            routing_id="1000001",
            provider="whatsapp",
            provider_message_id=wamid,
            status="delivered",
            provider_time=T1,
            raw={"id": wamid, "status": "delivered"},
        )
        store_statuses(session, delivery, [status], T0)


@pytest.mark.parametrize("had_unknown", [False, True])
def test_a_batch_writes_what_one_statement_each_writes(db: Database, had_unknown: bool) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the batch is PostgreSQL's")
    world = make_world(db)
    batch = [claimed(db, world, f"1555124000{n}") for n in range(3)]
    alone = [claimed(db, world, f"1555125000{n}") for n in range(3)]

    with counted(db) as statements, db.transaction() as session:
        given = [
            acceptance(c, f"wamid.B{n}", unknown=2, had=had_unknown) for n, c in enumerate(batch)
        ]
        moved = accept_many(session, given, T1)
    assert moved == {(c.message_id, c.cycle, c.attempt) for c in batch}
    assert len(statements) == 2, statements  # the batch, then its parked statuses (none)

    for n, claim in enumerate(alone):
        with db.transaction() as session:
            one = accept_at_once(
                session,
                claim,
                f"wamid.A{n}",
                T1,
                http_status=200,
                response_body='{"ok":1}',
                unknown_attempts=2,
                had_unknown=had_unknown,
            )
            assert one is not None and one.applied
    for n, (ours, theirs) in enumerate(zip(batch, alone, strict=True)):
        mine, other = written(db, ours.message_id), written(db, theirs.message_id)
        assert mine["provider_message_id"] == f"wamid.B{n}"
        assert mine["details"][-1] == {"provider_message_id": f"wamid.B{n}"}
        assert other["details"][-1] == {"provider_message_id": f"wamid.A{n}"}
        assert mine["details"][:-1] == other["details"][:-1]
        for part in ("message", "attempts", "events"):
            assert mine[part] == other[part], part
        assert mine["message"]["status"] == "sent" and mine["message"]["sent_at"] == T1
        assert mine["message"]["had_unknown_outcome"] is had_unknown
        with db.transaction() as session:
            attempt = session.scalars(select(Attempt).where(Attempt.message_id == ours.message_id))
            assert next(attempt).provider_message_id == f"wamid.B{n}"


def test_the_unusual_are_left_untouched_and_the_rest_recorded(db: Database) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the batch is PostgreSQL's")
    world = make_world(db)
    plain, parked, overtaken, taken_over = (claimed(db, world, f"1555126000{n}") for n in range(4))
    parked_delivered(db, world, "wamid.P")
    with db.transaction() as session:
        # A `failed` webhook matched by correlation id got there before the answer.
        assert apply_status(
            session, overtaken.message_id, Status.FAILED, Source.WEBHOOK, T1
        ).applied
    later = T0 + LEASE + timedelta(seconds=1)
    with db.transaction() as session:
        # The lease lapsed and another worker re-claimed: attempt 2 holds the message now.
        again = claim_message(session, taken_over.message_id, later, LEASE)
        assert again is not None and again.attempt == taken_over.attempt + 1

    given = [
        acceptance(plain, "wamid.OK"),
        acceptance(parked, "wamid.P"),
        acceptance(overtaken, "wamid.W"),
        acceptance(taken_over, "wamid.L"),
    ]
    with db.transaction() as session:
        moved = accept_many(session, given, later)
    assert moved == {
        (plain.message_id, plain.cycle, plain.attempt),
        (parked.message_id, parked.cycle, parked.attempt),
    }

    with db.transaction() as session:

        def state(claim: Claim) -> tuple[str, str | None, int]:
            message = get_message(session, claim.message_id)
            assert message is not None
            return message.status, message.provider_message_id, message.attempt

        assert state(plain)[:2] == ("sent", "wamid.OK")
        # The status parked before the id was known, applied with the acceptance.
        assert state(parked)[:2] == ("delivered", "wamid.P")
        # Left as they were, their attempts unanswered and no `accepted` event: the
        # general path records them (`record_outcome`).
        assert state(overtaken)[:2] == ("failed", None)
        assert state(taken_over) == ("sending", None, again.attempt)
        for claim in (overtaken, taken_over):
            kinds = session.scalars(
                select(MessageEvent.kind).where(MessageEvent.message_id == claim.message_id)
            ).all()
            assert "accepted" not in kinds
            finished = session.scalars(
                select(Attempt.finished_at).where(
                    Attempt.message_id == claim.message_id, Attempt.number == claim.attempt
                )
            ).one()
            assert finished is None


def test_an_empty_batch_asks_nothing(db: Database) -> None:
    with counted(db) as statements, db.transaction() as session:
        assert accept_many(session, [], T1) == set()
    assert statements == []


def test_a_message_given_twice_is_left_whole_to_the_general_path(db: Database) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the batch is PostgreSQL's")
    world = make_world(db)
    twice, once = claimed(db, world, "15551270001"), claimed(db, world, "15551270002")
    given = [
        acceptance(twice, "wamid.T1"),
        acceptance(once, "wamid.O"),
        acceptance(twice, "wamid.T2"),
    ]
    with db.transaction() as session:
        moved = accept_many(session, given, T1)
    assert moved == {(once.message_id, once.cycle, once.attempt)}
    with db.transaction() as session:
        message = get_message(session, twice.message_id)
        assert message is not None and (message.status, message.provider_message_id) == (
            "sending",
            None,
        )
