"""The one-statement acceptance (`accept_at_once`) against what runs beside it, on real
PostgreSQL with real commits: a webhook status for the same provider id, a re-claim
after a lost lease, another identity's status, a second provider id. Each interleaving
is ordered explicitly: a thread waits on an event, or until another backend is seen
waiting on a row lock (a condition, polled; never a duration)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func, select, text

from app import migrate
from app.config import Config
from app.correlation import derive_key
from app.db import Database
from app.models import Attempt, Message, MessageEvent, WebhookStatus
from app.providers.base import SendResult
from app.reconcile import apply_recorded, record_delivery
from app.repo.acceptance import accept_at_once
from app.repo.attempts import mark_lost_attempt, start_attempt
from app.repo.claims import Claim, claim_message
from app.repo.failures import record_failed
from app.repo.inbox import IncomingStatus
from app.repo.matching import record_provider_id
from app.repo.requeues import requeue_from_dashboard, requeue_message
from app.repo.status_apply import apply_stored_status
from jobs.record import record_outcome

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_message, make_world

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})
LEASE = timedelta(seconds=CONFIG.lease_seconds)
T1 = T0 + timedelta(seconds=2)
WAIT = 60  # seconds an ordered step may take on a loaded machine before the test gives up


def accepted(wamid: str) -> SendResult:
    return SendResult(provider_message_id=wamid, http_status=200, response_body='{"ok":1}')


def claimed(database: Database, world: World, recipient: str) -> Claim:
    message_id = make_message(database, world, recipient=recipient)
    with database.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, f"key-{message_id}", T0)
    return claim


def status(
    world: World, wamid: str, word: str, correlation_id: str | None = None, identity_id: int = 0
) -> IncomingStatus:
    return IncomingStatus(
        identity_id=identity_id or world.identity_id,
        provider="whatsapp",
        provider_message_id=wamid,
        status=word,
        provider_time=T1,
        correlation_id=correlation_id,
    )


def deliver(database: Database, incoming: IncomingStatus) -> dict[str, int]:
    """The webhook view's path: the delivery and its status committed, then applied."""
    with database.transaction() as session:
        recorded = record_delivery(
            session,
            provider="whatsapp",
            identity_id=incoming.identity_id,
            headers={},
            body="{}",
            now=T1,
            statuses=[incoming],
        )
    return apply_recorded(database, recorded, T1)


def wait_until_blocked(database: Database) -> None:
    """Polls a condition: go on once a backend of this database waits on a lock (the test
    holds the only other transactions, so it is the step just started)."""
    deadline = time.monotonic() + WAIT
    while True:
        with database.engine.connect() as connection:
            waiting = connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar()
        if waiting:
            return
        assert time.monotonic() < deadline, "the second step never waited on a lock"
        time.sleep(0.01)


class Runner:
    """Threads whose exceptions are surfaced, not swallowed."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.results: dict[str, Any] = {}

    def start(self, name: str, target: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                self.results[name] = target()
            except BaseException as exc:  # surfaced by join
                self.errors.append(exc)

        thread = threading.Thread(target=run, name=name)
        self.threads.append(thread)
        thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=WAIT)
            assert not thread.is_alive(), f"{thread.name} never finished"
        assert self.errors == []


def message_row(database: Database, message_id: int) -> Message:
    with database.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        session.expunge(row)
        return row


def in_its_second_cycle(database: Database, world: World) -> Claim:
    """Cycle 1 failed (a definite rejection) and was requeued; cycle 2 is claimed now."""
    first = claimed(database, world, "15551239001")
    with database.transaction() as session:
        failed = record_failed(
            session,
            first,
            T0,
            failure_class="rejected",
            error={"provider": "whatsapp", "code": 131026, "title": "Undeliverable"},
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
        assert failed.applied
        requeue_message(session, first.message_id, T0, actor="ops@example.com")
    with database.transaction() as session:
        claim = claim_message(session, first.message_id, T0, LEASE)
        assert claim is not None and claim.cycle == 2
        start_attempt(session, claim, f"key-{first.message_id}-2", T0)
    return claim


def test_a_status_parked_while_the_acceptance_waited_for_the_row_is_applied_with_it(
    committed_db: Database,
) -> None:
    """A status that beat the send's answer parks; the transaction that then records the
    provider id applies it (apply_parked), without waiting for the sweeper. Here the
    acceptance waits for the message row (a requeue from a stale dashboard page holds
    it), and the status parks and commits while it waits: the acceptance writes the id
    after that commit, so it must find the status."""
    world = make_world(committed_db)
    claim = in_its_second_cycle(committed_db, world)
    holding, release = threading.Event(), threading.Event()
    runner = Runner()

    def stale_requeue() -> bool:
        with committed_db.transaction() as session:
            outcome = requeue_from_dashboard(
                session, claim.message_id, None, 1, T1, actor="ops@example.com"
            )
            holding.set()
            assert release.wait(timeout=WAIT)
            return outcome.stale

    def record() -> str:
        with committed_db.transaction() as session:
            outcome, _ = record_outcome(
                session, CONFIG, claim, accepted("wamid.PARKED"), (0, 0, False), T1, "campaign"
            )
            return outcome

    runner.start("requeue", stale_requeue)
    assert holding.wait(timeout=WAIT)
    runner.start("worker", record)
    wait_until_blocked(committed_db)
    # Meanwhile `delivered` arrives with no correlation id: nothing knows the id yet.
    assert deliver(committed_db, status(world, "wamid.PARKED", "delivered")) == {
        "duplicate": 0,
        "parked": 1,
    }
    release.set()
    runner.join()
    assert runner.results == {"requeue": True, "worker": "accepted (sent)"}

    row = message_row(committed_db, claim.message_id)
    assert (row.status, row.provider_message_id) == ("delivered", "wamid.PARKED")
    with committed_db.transaction() as session:
        result = session.scalars(
            select(WebhookStatus.result).where(WebhookStatus.provider_message_id == "wamid.PARKED")
        ).one()
    assert result == "applied"


def test_a_reclaim_holding_the_row_while_the_answer_is_recorded_loses_nothing(
    committed_db: Database,
) -> None:
    """The lease lapsed mid-call; a re-claim takes the row (it will mark our attempt
    unknown) just as our answer arrives. The answer must neither deadlock with the
    re-claim nor be lost: the provider has the message, so it is recorded late, `sent`,
    and no retry may send it again."""
    world = make_world(committed_db)
    claim = claimed(committed_db, world, "15551239002")
    later = T0 + LEASE + timedelta(seconds=1)
    claimed_again, release = threading.Event(), threading.Event()
    runner = Runner()

    def reclaim() -> int:
        with committed_db.transaction() as session:
            again = claim_message(session, claim.message_id, later, LEASE)
            assert again is not None and again.lease_lost
            claimed_again.set()
            assert release.wait(timeout=WAIT)
            mark_lost_attempt(session, again, later)
            return again.attempt

    def record() -> str:
        with committed_db.transaction() as session:
            outcome, _ = record_outcome(
                session, CONFIG, claim, accepted("wamid.LATE"), (0, 0, False), later, "campaign"
            )
            return outcome

    runner.start("reclaim", reclaim)
    assert claimed_again.wait(timeout=WAIT)
    runner.start("worker", record)
    wait_until_blocked(committed_db)
    release.set()
    runner.join()
    assert runner.results == {
        "reclaim": claim.attempt + 1,
        "worker": "accepted late (sent): the lease had been taken over",
    }
    row = message_row(committed_db, claim.message_id)
    assert (row.status, row.provider_message_id, row.next_attempt_at) == (
        "sent",
        "wamid.LATE",
        None,
    )
    with committed_db.transaction() as session:
        ours = session.scalars(
            select(Attempt).where(
                Attempt.message_id == claim.message_id, Attempt.number == claim.attempt
            )
        ).one()
        assert (ours.outcome, ours.provider_message_id) == ("accepted", "wamid.LATE")


@pytest.mark.parametrize("webhook_first", [True, False], ids=["webhook-first", "worker-first"])
def test_a_correlated_status_and_the_acceptance_apply_once_in_either_order(
    committed_db: Database, webhook_first: bool
) -> None:
    """WhatsApp's `delivered` echoes our correlation id, so it locks the message row. If
    it holds the row first, the acceptance waits, then moves nothing itself (the general
    path keeps the id, the state stays `delivered`); if the acceptance holds it first,
    the status waits and then applies on top. Either way one `delivered`, no double send."""
    world = make_world(committed_db)
    claim = claimed(committed_db, world, "15551239003")
    correlation = message_row(committed_db, claim.message_id).correlation_id
    with committed_db.transaction() as session:
        recorded = record_delivery(
            session,
            provider="whatsapp",
            identity_id=world.identity_id,
            headers={},
            body="{}",
            now=T1,
            statuses=[status(world, "wamid.C", "delivered", correlation)],
        )
    first_holds, release = threading.Event(), threading.Event()
    runner = Runner()

    def webhook_holding() -> str:
        with committed_db.transaction() as session:
            result = apply_stored_status(session, recorded.to_apply[0], T1)
            first_holds.set()
            assert release.wait(timeout=WAIT)
            return result

    def worker_holding() -> bool:
        with committed_db.transaction() as session:
            moved = accept_at_once(
                session,
                claim,
                "wamid.C",
                T1,
                http_status=200,
                response_body=None,
                unknown_attempts=0,
                had_unknown=False,
            )
            first_holds.set()
            assert release.wait(timeout=WAIT)
            return moved is not None

    def worker() -> str:
        with committed_db.transaction() as session:
            outcome, _ = record_outcome(
                session, CONFIG, claim, accepted("wamid.C"), (0, 0, False), T1, "campaign"
            )
            return outcome

    runner.start("first", webhook_holding if webhook_first else worker_holding)
    assert first_holds.wait(timeout=WAIT)
    runner.start(
        "second", worker if webhook_first else lambda: apply_recorded(committed_db, recorded, T1)
    )
    wait_until_blocked(committed_db)
    release.set()
    runner.join()
    if webhook_first:
        assert runner.results == {"first": "applied", "second": "accepted (kept)"}
        applied = ["create", "claim", "delivered"]
    else:
        # The status was stored unapplied before the statement: the worker applied it
        # (apply_parked), and the webhook's own apply found it taken.
        assert runner.results == {"first": True, "second": {"duplicate": 1}}
        applied = ["create", "claim", "accepted", "delivered"]
    row = message_row(committed_db, claim.message_id)
    assert (row.status, row.provider_message_id) == ("delivered", "wamid.C")
    with committed_db.transaction() as session:
        kinds = session.scalars(
            select(MessageEvent.kind)
            .where(MessageEvent.message_id == claim.message_id, MessageEvent.applied)
            .order_by(MessageEvent.id)
        ).all()
        doubles = session.scalar(
            select(func.count())
            .select_from(MessageEvent)
            .where(MessageEvent.message_id == claim.message_id, MessageEvent.kind == "double_send")
        )
    assert (list(kinds), doubles) == (applied, 0)


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
