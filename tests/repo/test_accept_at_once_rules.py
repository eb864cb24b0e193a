"""The one-statement acceptance's rules with nothing beside it: a second provider id for one
message is flagged and the first kept; a status parked under another identity is never
applied to ours; on SQLite the acceptance takes the general path."""

from __future__ import annotations

from pathlib import Path

from flask import Flask
from sqlalchemy import func, select

from app import migrate
from app.correlation import derive_key
from app.db import Database
from app.models import Attempt, Message, MessageEvent, WebhookStatus
from app.repo.acceptance import accept_at_once
from app.repo.matching import record_provider_id
from jobs.record import record_outcome

from ..conftest import SECRET_KEY
from ..factories import make_world
from .acceptance_steps import (
    CONFIG,
    T1,
    accepted,
    claimed,
    deliver,
    status,
)


def test_a_second_provider_id_is_flagged_and_the_first_kept(db: Database) -> None:
    """The row already knows another id for this cycle (a status adopted it): the one
    statement moves nothing, and the general path flags the double send and keeps the
    first id, moving the message to `sent`."""
    world = make_world(db)
    claim = claimed(db, world, "15551239005")
    with db.transaction() as session:
        record_provider_id(session, claim.message_id, claim.cycle, "wamid.FIRST")
    with db.transaction() as session:
        outcome, _ = record_outcome(
            session, CONFIG, claim, accepted("wamid.SECOND"), (0, 0, False), T1, "campaign"
        )
    assert outcome == "accepted (sent)"
    with db.transaction() as session:
        row = session.get(Message, claim.message_id, populate_existing=True)
        assert row is not None and (row.status, row.provider_message_id) == (
            "sent",
            "wamid.FIRST",
        )
        doubles = session.scalars(
            select(MessageEvent.detail).where(
                MessageEvent.message_id == claim.message_id, MessageEvent.kind == "double_send"
            )
        ).all()
        assert doubles == [{"provider_message_ids": ["wamid.FIRST", "wamid.SECOND"]}]
        answer = session.scalars(
            select(Attempt.provider_message_id).where(Attempt.message_id == claim.message_id)
        ).one()
        assert answer == "wamid.SECOND"


def test_a_status_parked_under_another_identity_is_not_applied_to_ours(db: Database) -> None:
    """Another tenant's number reporting the same provider id parks under its identity;
    our acceptance of that id applies only what parked under ours."""
    ours = make_world(db)
    theirs = make_world(db, name="globex", account_id="2000002", verify_token="verify-globex")
    claim = claimed(db, ours, "15551239006")
    assert deliver(db, status(theirs, "wamid.SHARED", "read", identity_id=theirs.identity_id)) == {
        "duplicate": 0,
        "parked": 1,
    }
    assert deliver(db, status(ours, "wamid.SHARED", "delivered")) == {"duplicate": 0, "parked": 1}
    with db.transaction() as session:
        outcome, _ = record_outcome(
            session, CONFIG, claim, accepted("wamid.SHARED"), (0, 0, False), T1, "campaign"
        )
    assert outcome == "accepted (sent)"
    with db.transaction() as session:
        row = session.get(Message, claim.message_id, populate_existing=True)
        assert row is not None and row.status == "delivered"
        results = dict(
            session.execute(
                select(WebhookStatus.identity_id, WebhookStatus.result).where(
                    WebhookStatus.provider_message_id == "wamid.SHARED"
                )
            ).all()
        )
    assert results == {ours.identity_id: "applied", theirs.identity_id: "parked"}


def test_on_sqlite_the_acceptance_takes_the_general_path(app: Flask, tmp_path: Path) -> None:
    """SQLite (`make run`'s embedded default) has no one statement: `accept_at_once`
    declines, and the general path records the same acceptance, parked status included."""
    database = Database(
        f"sqlite:///{tmp_path / 'ratchet.db'}", correlation_key=derive_key(SECRET_KEY)
    )
    migrate.upgrade(database.engine)
    try:
        world = make_world(database)
        claim = claimed(database, world, "15551239007")
        assert deliver(database, status(world, "wamid.LITE", "delivered")) == {
            "duplicate": 0,
            "parked": 1,
        }
        with database.transaction() as session:
            assert (
                accept_at_once(
                    session,
                    claim,
                    "wamid.LITE",
                    T1,
                    http_status=200,
                    response_body=None,
                    unknown_attempts=0,
                    had_unknown=False,
                )
                is None
            )
            assert (
                session.scalar(
                    select(func.count())
                    .select_from(Attempt)
                    .where(Attempt.finished_at.is_not(None))
                )
                == 0
            )
        with database.transaction() as session:
            outcome, _ = record_outcome(
                session, CONFIG, claim, accepted("wamid.LITE"), (1, 0, True), T1, "campaign"
            )
        assert outcome == "accepted (sent)"
        with database.transaction() as session:
            row = session.get(Message, claim.message_id, populate_existing=True)
            assert row is not None
            assert (row.status, row.provider_message_id, row.unknown_attempts) == (
                "delivered",
                "wamid.LITE",
                1,
            )
            assert row.had_unknown_outcome is True
            attempt = session.scalars(select(Attempt)).one()
            assert (attempt.outcome, attempt.provider_message_id) == ("accepted", "wamid.LITE")
    finally:
        database.dispose()
