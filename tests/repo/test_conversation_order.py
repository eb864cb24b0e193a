"""Each conversation in order: a drain's claim takes a recipient's next message only once
the earlier one on that identity and lane has an outcome; a retry holds it for at most the
hold, and the message that goes past it says which one it overtook. The rule is the claim's
SQL, so it holds between two claims in different transactions (two drains, two workers).

Found in the issue's run: 17 of 20 people sent six messages each received them in another
order than the API accepted them, a batch calling one person's messages side by side."""

from __future__ import annotations

from datetime import datetime, timedelta

from flask import Flask
from sqlalchemy import select

from app.config import Config
from app.db import Database
from app.models import MessageEvent
from app.repo.acceptance import record_accepted
from app.repo.attempts import start_attempt
from app.repo.claims import Claim, claim_batch
from app.repo.due import count_due
from app.repo.failures import record_retry
from app.repo.give_back import release_unsent
from app.repo.messages import NewMessage, create_message

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_message, make_world
from ..meta import BUSINESS_ACCOUNT_ID, PHONE_NUMBER_ID, account_body, encode
from ..whatsapp_world import SECRET, deliver

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})
LEASE = timedelta(seconds=25)
HOLD = timedelta(seconds=CONFIG.conversation_hold)
ANNA, BEN = "15557700001", "15557700002"


def claim(database: Database, world: World, at: datetime = T0, limit: int = 10) -> list[Claim]:
    with database.transaction() as session:
        claims = claim_batch(session, world.identity_id, "campaign", limit, at, LEASE)
        for c in claims:
            start_attempt(session, c, f"key-{c.message_id}", at)
        return claims


def due(database: Database, world: World, at: datetime) -> int:
    with database.transaction() as session:
        return count_due(session, world.identity_id, "campaign", at, CONFIG)


def test_a_recipients_next_message_waits_until_the_one_before_has_an_outcome(
    db: Database,
) -> None:
    world = make_world(db)
    anna = [make_message(db, world, recipient=ANNA, text=f"part {n}") for n in range(3)]
    ben = make_message(db, world, recipient=BEN)

    first = claim(db, world)
    # One batch takes Anna's first and Ben's, never two of Anna's side by side.
    assert [c.message_id for c in first] == [anna[0], ben]
    assert due(db, world, T0) == 0
    assert claim(db, world) == []  # Anna's first is in flight

    with db.transaction() as session:
        assert record_accepted(
            session, first[0], "wamid.a0", T0, unknown_attempts=0, had_unknown=False
        )
    assert due(db, world, T0) == 1
    assert [c.message_id for c in claim(db, world)] == [anna[1]]


def test_a_retry_holds_the_next_message_for_the_hold_and_then_it_says_what_it_overtook(
    db: Database,
) -> None:
    world = make_world(db)
    anna = [make_message(db, world, recipient=ANNA, text=f"part {n}") for n in range(3)]
    (first,) = claim(db, world)
    with db.transaction() as session:  # a rate limit: again in ten minutes
        assert record_retry(
            session,
            first,
            T0 + timedelta(minutes=10),
            failure_class="rate_limited",
            error=None,
            unknown_attempts=0,
            rate_limited_attempts=1,
            had_unknown=False,
        )

    within = T0 + HOLD - timedelta(seconds=1)
    assert due(db, world, within) == 0
    assert claim(db, world, within) == []

    past = T0 + HOLD + timedelta(seconds=1)
    assert due(db, world, past) == 1
    (second,) = claim(db, world, past)  # the next goes; the one after still waits for it
    assert second.message_id == anna[1]
    with db.transaction() as session:
        detail = session.scalars(
            select(MessageEvent.detail).where(
                MessageEvent.message_id == anna[1], MessageEvent.kind == "claim"
            )
        ).one()
    assert detail["overtook"] == anna[0]
    assert detail["note"] == f"sent before message {anna[0]}, which was still being retried"


def test_a_message_posted_during_a_long_retry_still_waits_the_hold_from_its_own_acceptance(
    db: Database,
) -> None:
    world = make_world(db)
    earlier = make_message(db, world, recipient=ANNA)
    (first,) = claim(db, world)
    with db.transaction() as session:
        record_retry(
            session,
            first,
            T0 + timedelta(minutes=15),
            failure_class="rate_limited",
            error=None,
            unknown_attempts=0,
            rate_limited_attempts=1,
            had_unknown=False,
        )
    posted = T0 + timedelta(minutes=5)  # the retry has been waiting for minutes by now
    later = make_message(db, world, recipient=ANNA, now=posted)
    assert claim(db, world, posted + timedelta(seconds=1)) == []
    assert [c.message_id for c in claim(db, world, posted + HOLD + timedelta(seconds=1))] == [later]
    assert earlier != later


def test_a_claim_not_yet_committed_in_another_transaction_still_holds_the_conversation(
    committed_db: Database,
) -> None:
    """Two drains' claims at once (shards, workers): the first has taken Anna's first
    message and not committed; the second skips that locked row and must not take her
    second, which its snapshot shows behind a `queued` one."""
    db = committed_db
    world = make_world(db)
    anna = [make_message(db, world, recipient=ANNA, text=f"part {n}") for n in range(2)]
    ben = make_message(db, world, recipient=BEN)
    with db.transaction() as one:
        taken = claim_batch(one, world.identity_id, "campaign", 1, T0, LEASE)
        assert [c.message_id for c in taken] == [anna[0]]
        with db.transaction() as other:
            assert [
                c.message_id
                for c in claim_batch(other, world.identity_id, "campaign", 10, T0, LEASE)
            ] == [ben]


def claimed_ids(database: Database, world: World, at: datetime) -> list[int]:
    return [c.message_id for c in claim(database, world, at)]


def test_a_message_given_back_unsent_past_the_hold_is_never_claimed_with_the_next(
    db: Database,
) -> None:
    """Found by an outside review: a message given back unsent (`release_unsent`: a drain
    cut short, a stand-down) keeps its first claim's `sending_at`; once that was older than
    the hold, its next message was claimed in the same batch and both were called side by
    side. Due again, or in flight, it holds the next whatever its age."""
    world = make_world(db)
    anna = [make_message(db, world, recipient=ANNA, text=f"part {n}") for n in range(2)]
    (first,) = claim(db, world)
    with db.transaction() as session:
        assert release_unsent(session, first, T0)

    later = T0 + HOLD + timedelta(seconds=1)  # the database came back a minute later
    assert due(db, world, later) == 1
    (again,) = claim(db, world, later)
    assert again.message_id == anna[0]
    # In flight now, its first claim long past the hold: the next still waits for it.
    assert due(db, world, later) == 0
    assert claim(db, world, later + timedelta(seconds=1)) == []

    # Its lease lapsed (its worker died): due again, and still alone in its batch.
    lapsed = later + LEASE + timedelta(seconds=1)
    assert claimed_ids(db, world, lapsed) == [anna[0]]


def test_a_message_whose_template_meta_holds_does_not_hold_its_conversation(
    app: Flask, db: Database
) -> None:
    """Found by an outside review: an earlier message whose template Meta paused is never
    claimed (`queued` while the hold lasts, with no first claim for the hold to count
    from), and it held every later message to that person without bound."""
    world = make_world(
        db, account_id=PHONE_NUMBER_ID, app_secret=SECRET, business_account_id=BUSINESS_ACCOUNT_ID
    )
    with db.transaction() as session:
        held, _ = create_message(
            session,
            NewMessage(
                tenant_id=world.tenant_id,
                identity_id=world.identity_id,
                recipient=ANNA,
                lane="campaign",
                fingerprint="f" * 64,
                template={"name": "order_update", "language": "en_US"},
            ),
            T0,
        )
    code = make_message(db, world, recipient=ANNA, text="your code is 1234")
    response = deliver(app.test_client(), encode(account_body("template_status_paused")))
    assert response.status_code == 200, response.get_json()

    at = T0 + timedelta(minutes=5)
    assert due(db, world, at) == 1
    assert claimed_ids(db, world, at) == [code]
    assert held.id != code
