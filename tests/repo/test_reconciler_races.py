"""A status that races the send response recording its provider id, on real PostgreSQL.

With our correlation id (WhatsApp echoes it on sent/delivered/read) the two serialise on
the message row and never miss each other. Without it (a `failed` status carries none) a
status can be parked while the worker looks the other way; the sweeper's replay is the
backstop the design names, and the test runs it.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.db import Database
from app.models import Message, WebhookStatus
from app.repo.acceptance import record_accepted
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.inbox import (
    IncomingStatus,
    expire_parked,
    pending_status_ids,
    store_delivery,
    store_statuses,
)
from app.repo.status_apply import apply_webhook_status

from ..conftest import T0
from ..factories import make_message, make_world

LEASE = timedelta(seconds=25)
WINDOW = timedelta(minutes=10)


def incoming(identity_id: int, wamid: str, word: str, correlation_id: str | None):
    return IncomingStatus(
        identity_id=identity_id,
        provider="whatsapp",
        provider_message_id=wamid,
        status=word,
        provider_time=T0 + timedelta(seconds=3),
        correlation_id=correlation_id,
    )


def store(database: Database, status: IncomingStatus) -> int:
    with database.transaction() as session:
        delivery = store_delivery(session, "whatsapp", status.identity_id, {}, "{}", T0)
        ids, _ = store_statuses(session, delivery, [status], T0)
        return ids[0]


@pytest.mark.parametrize("with_correlation", [True, False], ids=["correlated", "bare"])
@pytest.mark.parametrize("run", range(6))
def test_a_status_racing_the_recorded_id_is_never_lost(
    committed_db: Database, with_correlation: bool, run: int
) -> None:
    world = make_world(committed_db)
    message_id = make_message(committed_db, world)
    with committed_db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", T0)
        correlation = session.get(Message, message_id).correlation_id  # type: ignore[union-attr]
    wamid = f"wamid.RACE{run}"
    status_id = store(
        committed_db,
        incoming(world.identity_id, wamid, "delivered", correlation if with_correlation else None),
    )
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def webhook() -> None:
        try:
            barrier.wait(timeout=10)
            with committed_db.transaction() as session:
                apply_webhook_status(session, status_id, T0 + timedelta(seconds=4))
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    def worker() -> None:
        try:
            barrier.wait(timeout=10)
            with committed_db.transaction() as session:
                record_accepted(
                    session,
                    claim,
                    wamid,
                    T0 + timedelta(seconds=4),
                    unknown_attempts=0,
                    had_unknown=False,
                )
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=webhook), threading.Thread(target=worker)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors

    def status_now() -> str:
        with committed_db.transaction() as session:
            return session.scalars(select(Message.status).where(Message.id == message_id)).one()

    if with_correlation:
        assert status_now() == "delivered"
    # The sweeper's replay: whatever is still pending gets applied.
    with committed_db.transaction() as session:
        pending = pending_status_ids(session, T0 + timedelta(seconds=5), WINDOW)
    for pending_id in pending:
        with committed_db.transaction() as session:
            apply_webhook_status(session, pending_id, T0 + timedelta(seconds=5))
    assert status_now() == "delivered"
    with committed_db.transaction() as session:
        row = session.get(WebhookStatus, status_id)
        assert row is not None and row.result == "applied"


def test_parked_statuses_that_never_match_expire_after_seven_days(db: Database) -> None:
    world = make_world(db)
    status_id = store(db, incoming(world.identity_id, "wamid.NOBODY", "sent", None))
    with db.transaction() as session:
        assert apply_webhook_status(session, status_id, T0) == "parked"
        assert pending_status_ids(session, T0 + timedelta(minutes=1), WINDOW) == [status_id]
        # Past the window a parked status waits for its id (or expiry), not every pass.
        assert pending_status_ids(session, T0 + timedelta(minutes=11), WINDOW) == []
        assert expire_parked(session, T0 + timedelta(days=6), timedelta(days=7)) == 0
        assert expire_parked(session, T0 + timedelta(days=7, seconds=1), timedelta(days=7)) == 1
        row = session.get(WebhookStatus, status_id, populate_existing=True)
        assert row is not None and row.result == "expired"


def test_another_identity_naming_our_provider_id_does_not_shadow_our_status(
    db: Database,
) -> None:
    ours = make_world(db)
    theirs = make_world(db, name="globex", account_id="2000002")
    message_id = make_message(db, ours)
    with db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        record_accepted(session, claim, "wamid.SHARED", T0, unknown_attempts=0, had_unknown=False)
    spoofed = store(db, incoming(theirs.identity_id, "wamid.SHARED", "read", None))
    genuine = store(db, incoming(ours.identity_id, "wamid.SHARED", "read", None))
    with db.transaction() as session:
        assert apply_webhook_status(session, spoofed, T0) == "parked"  # not our message
        assert apply_webhook_status(session, genuine, T0) == "applied"
        assert session.get(Message, message_id, populate_existing=True).status == "read"  # type: ignore[union-attr]
