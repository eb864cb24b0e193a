"""Scheduled and expiring messages at the claim (issue 34), with the clock passed in: a
message with a `send_at` ahead is not claimed, counted or rung before it and is after; a
drain with nothing due learns when to ring itself; a scheduled message holds no later
message of its conversation; an expired message is never claimed, and is failed
`expired`, off the actionable list, with a status callback saying so."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, update

from app.callback_models import Callback
from app.config import Config
from app.crypto import SecretBox
from app.db import Database
from app.models import Message
from app.repo.attempts import start_attempt
from app.repo.callback_endpoints import EVENTS, create_endpoint
from app.repo.claims import Claim, claim_batch, claim_message
from app.repo.due import count_due, earliest_due
from app.repo.expiry import expire_due
from app.repo.overview import due_since, stuck_messages
from app.repo.queue import dead_letters, due_drains
from app.repo.requeues import requeue_message

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_message, make_world

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})
LEASE = timedelta(seconds=25)
LATER = T0 + timedelta(hours=1)
ANNA = "15557700001"


def set_times(
    db: Database, message_id: int, *, not_before: datetime | None = None, expires_at=None
) -> None:
    with db.transaction() as session:
        session.execute(
            update(Message)
            .where(Message.id == message_id)
            .values(not_before=not_before, expires_at=expires_at)
        )


def claim(db: Database, world: World, at: datetime) -> list[int]:
    with db.transaction() as session:
        claims: list[Claim] = claim_batch(session, world.identity_id, "campaign", 10, at, LEASE)
        for c in claims:
            start_attempt(session, c, f"key-{c.message_id}", at)
        return [c.message_id for c in claims]


def test_a_scheduled_message_is_claimed_at_its_time_and_not_before(db: Database) -> None:
    world = make_world(db)
    scheduled = make_message(db, world)
    set_times(db, scheduled, not_before=LATER)
    just_before = LATER - timedelta(milliseconds=1)
    with db.transaction() as session:
        assert count_due(session, world.identity_id, "campaign", just_before, CONFIG) == 0
        # What the drain rings itself for, and the sweeper's view: nothing due yet.
        assert earliest_due(session, world.identity_id, "campaign", T0) == LATER
        assert due_drains(session, just_before) == []
        assert claim_message(session, scheduled, just_before, LEASE) is None
    assert claim(db, world, just_before) == []
    with db.transaction() as session:
        assert due_drains(session, LATER) == [(world.identity_id, "campaign")]
    assert claim(db, world, LATER) == [scheduled]


def test_a_scheduled_message_holds_no_later_message_of_its_conversation(db: Database) -> None:
    world = make_world(db)
    scheduled = make_message(db, world, recipient=ANNA, text="tomorrow")
    set_times(db, scheduled, not_before=LATER)
    now = make_message(db, world, recipient=ANNA, text="now")
    assert claim(db, world, T0) == [now]


def test_an_expired_message_is_not_claimed_and_its_drain_fails_it(db: Database) -> None:
    world = make_world(db)
    with db.transaction() as session:
        create_endpoint(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=world.tenant_id,
            url="https://hooks.example.com/ratchet",
            host="hooks.example.com",
            events=list(EVENTS),
            now=T0,
        )
    expiring = make_message(db, world)
    set_times(db, expiring, expires_at=T0 + timedelta(minutes=5))
    at = T0 + timedelta(minutes=5)
    with db.transaction() as session:
        assert count_due(session, world.identity_id, "campaign", at, CONFIG) == 0
        assert claim_message(session, expiring, at, LEASE) is None
        # Still rung by the sweeper, so that its drain fails it.
        assert due_drains(session, at) == [(world.identity_id, "campaign")]
    assert claim(db, world, at) == []
    with db.transaction() as session:
        assert expire_due(session, world.identity_id, "campaign", at) == [expiring]
    with db.transaction() as session:
        row = session.get(Message, expiring, populate_existing=True)
        assert row is not None
        assert (row.status, row.failure_class, row.dead_letter_rank) == ("failed", "expired", None)
        assert row.last_error and row.last_error["title"] == "Expired before it was sent"
        sent = outbox(session, expiring)
    # The status callback: failed, class expired.
    assert sent == [("message.failed", "expired")]
    with db.transaction() as session:  # a dead letter of its own class, not actionable
        assert dead_letters(session) == []
        assert [d.message_id for d in dead_letters(session, failure_class="expired")] == [expiring]


def test_an_expired_message_whose_lease_lapsed_is_reclaimed_not_failed(db: Database) -> None:
    """Its call may have reached the provider: the re-claim makes no call and its plan
    waits the webhook grace before `expired` (tests/test_schedule.py)."""
    world = make_world(db)
    lapsed = make_message(db, world)
    set_times(db, lapsed, expires_at=T0 + timedelta(minutes=5))
    assert claim(db, world, T0) == [lapsed]
    at = T0 + timedelta(minutes=10)  # the lease and the validity are both over
    with db.transaction() as session:
        assert expire_due(session, world.identity_id, "campaign", at) == []
        (again,) = claim_batch(session, world.identity_id, "campaign", 10, at, LEASE)
    assert again.message_id == lapsed and again.lease_lost


def test_a_scheduled_message_is_not_stuck_for_the_time_it_waits(db: Database) -> None:
    world = make_world(db)
    scheduled = make_message(db, world, now=T0)
    set_times(db, scheduled, not_before=T0 + timedelta(days=3))
    stuck_after = timedelta(minutes=10)
    due_at = T0 + timedelta(days=3, minutes=1)  # due a minute ago, queued three days ago
    with db.transaction() as session:
        for at in (T0 + timedelta(days=1), due_at):
            assert stuck_messages(session, at, stuck_after, None) == []
        oldest = session.scalar(select(due_since(due_at)).where(Message.id == scheduled))
        assert oldest == T0 + timedelta(days=3)
        later = due_at + stuck_after
        assert [m.id for m in stuck_messages(session, later, stuck_after, None)] == [scheduled]


def test_a_requeued_expired_message_goes_now_without_its_old_validity(db: Database) -> None:
    """A person chose to send it late: the requeue clears its send_at and its expiry."""
    world = make_world(db)
    expired = make_message(db, world)
    set_times(db, expired, not_before=T0, expires_at=T0 + timedelta(minutes=5))
    at = T0 + timedelta(minutes=6)
    with db.transaction() as session:
        assert expire_due(session, world.identity_id, "campaign", at) == [expired]
    with db.transaction() as session:
        requeued = requeue_message(session, expired, at, actor="ana")
        assert (requeued.not_before, requeued.expires_at) == (None, None)
    assert claim(db, world, at) == [expired]


def outbox(session, message_id: int) -> list[tuple[str, str | None]]:
    query = select(Callback).where(Callback.message_id == message_id).order_by(Callback.id)
    return [
        (row.event, (row.payload["data"].get("error") or {}).get("class"))
        for row in session.scalars(query)
    ]
