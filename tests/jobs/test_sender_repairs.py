"""Broken senders: a stale answer never re-pauses a resumed identity, and an identity that can
never send is held, visibly, with nothing burned."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.config import Config
from app.crypto import SecretBox
from app.db import Database
from app.models import Attempt, Identity, Message, MessageEvent
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.give_back import Hold, record_held
from app.repo.identities import get_identity, pause_identity, resume_identity, update_identity
from jobs.send import send_one

from ..conftest import SECRET_KEY, at
from ..factories import make_message, make_world

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})
LEASE = timedelta(seconds=CONFIG.lease_seconds)
BOX = SecretBox(SECRET_KEY)
ERROR_190 = {"provider": "whatsapp", "code": 190, "title": "Invalid OAuth access token"}


def test_a_broken_sender_answer_to_an_attempt_claimed_before_a_resume_does_not_pause_again(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, at(0), LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", at(0))
    # While that attempt is in flight with the old token, the operator fixes the sender.
    with db.transaction() as session:
        assert pause_identity(session, world.identity_id, "code 190 on another message", at(1))
        update_identity(session, BOX, world.identity_id, token="the-new-token", now=at(2))
        assert resume_identity(session, world.identity_id, at(3))
    # The old token's answer arrives.
    with db.transaction() as session:
        hold = record_held(session, claim, at(4), error=ERROR_190, reason="code 190")
    assert hold is Hold.STALE
    with db.transaction() as session:
        identity = get_identity(session, world.identity_id)
        row = session.get(Message, message_id, populate_existing=True)
        assert identity is not None and row is not None
        assert identity.paused_at is None
        # Due again at once, and the attempt counted against no cap.
        assert (row.status, row.next_attempt_at, row.unknown_attempts) == ("sending", at(4), 0)
        kinds = session.scalars(
            select(MessageEvent.kind).where(MessageEvent.message_id == message_id)
        ).all()
    assert "stale_sender_broken" in kinds and "held" not in kinds


def test_a_new_credential_alone_makes_an_older_attempts_broken_sender_answer_stale(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, at(0), LEASE)
        assert claim is not None
        update_identity(session, BOX, world.identity_id, token="rotated", now=at(1))
        assert record_held(session, claim, at(2), error=ERROR_190, reason="190") is Hold.STALE
        identity = get_identity(session, world.identity_id)
        assert identity is not None and identity.paused_at is None


def test_a_broken_sender_answer_to_an_attempt_claimed_after_the_resume_still_pauses(
    db: Database,
) -> None:
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        assert pause_identity(session, world.identity_id, "190", at(0))
        assert resume_identity(session, world.identity_id, at(1))
        claim = claim_message(session, message_id, at(2), LEASE)
        assert claim is not None
        assert record_held(session, claim, at(3), error=ERROR_190, reason="code 190") is Hold.HELD
        identity = get_identity(session, world.identity_id)
        assert identity is not None and identity.paused_reason == "code 190"


def attempts_of(db: Database, message_id: int) -> int:
    with db.transaction() as session:
        return len(session.scalars(select(Attempt).where(Attempt.message_id == message_id)).all())


def test_a_token_that_cannot_be_decrypted_holds_the_identity_and_burns_nothing(
    db: Database,
) -> None:
    world = make_world(db)
    with db.transaction() as session:
        identity = session.get(Identity, world.identity_id)
        assert identity is not None
        # Written under another SECRET_KEY (a restored backup, a rotated key).
        identity.token_encrypted = SecretBox("some-other-secret-key-entirely").encrypt("tok")
    message_id = make_message(db, world)
    outcome, ring = send_one(db, BOX, CONFIG, message_id, lambda: at(1))
    assert outcome.startswith("held") and ring is None
    with db.transaction() as session:
        identity = get_identity(session, world.identity_id)
        row = session.get(Message, message_id, populate_existing=True)
        assert identity is not None and row is not None
        assert identity.paused_at == at(1)
        assert "cannot be decrypted with this SECRET_KEY" in (identity.paused_reason or "")
        assert (row.status, row.attempt) == ("queued", 0)
    assert attempts_of(db, message_id) == 0
    # Paused, it is not tried again (nor re-paused) until an operator resumes it.
    assert send_one(db, BOX, CONFIG, message_id, lambda: at(2))[0] == "not claimed"


def test_an_identity_of_a_provider_not_built_yet_holds_its_messages_with_that_reason(
    db: Database,
) -> None:
    world = make_world(db)
    with db.transaction() as session:
        # A row the CLI no longer creates (written by hand, or by an older version).
        identity = session.get(Identity, world.identity_id)
        assert identity is not None
        identity.provider = "telegram"
    message_id = make_message(db, world)
    outcome, _ = send_one(db, BOX, CONFIG, message_id, lambda: at(1))
    assert outcome.startswith("held")
    with db.transaction() as session:
        identity = get_identity(session, world.identity_id)
        assert identity is not None and identity.paused_at is not None
        assert "cannot send through telegram yet" in (identity.paused_reason or "")
    assert attempts_of(db, message_id) == 0


def test_a_token_update_committing_after_a_claim_read_the_old_token_makes_its_answer_stale(
    db: Database,
) -> None:
    """The update's time is stamped before it commits, so it can be earlier than a claim
    that still read the old token; the version the attempt was sent with decides."""
    world = make_world(db)
    message_id = make_message(db, world)
    with db.transaction() as session:
        claim = claim_message(session, message_id, at(5), LEASE)
        assert claim is not None
        identity = get_identity(session, world.identity_id)
        assert identity is not None
        sent_with = identity.credentials_version  # read with the token, in the claim
    with db.transaction() as session:
        update_identity(session, BOX, world.identity_id, token="the-new-token", now=at(1))
    with db.transaction() as session:
        hold = record_held(
            session,
            claim,
            at(6),
            error=ERROR_190,
            reason="code 190",
            credentials_version=sent_with,
        )
        assert hold is Hold.STALE
        identity = get_identity(session, world.identity_id)
        assert identity is not None and identity.paused_at is None
        assert identity.credentials_version == sent_with + 1
