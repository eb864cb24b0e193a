"""The steps the acceptance tests interleave on real PostgreSQL (`accept_at_once`): a claimed
attempt, its provider's answer, a webhook status delivered beside it, a runner whose
step waits on an event, a wait until another backend is blocked on a row lock, and a
transaction that will not wait long for one (`impatient`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.config import Config
from app.db import Database
from app.models import Message
from app.providers.base import SendResult
from app.reconcile import Recorded, apply_recorded, record_delivery
from app.repo.accept_batch import Acceptance
from app.repo.attempts import start_attempt
from app.repo.claims import Claim, claim_message
from app.repo.failures import record_failed
from app.repo.inbox import IncomingStatus
from app.repo.requeues import requeue_message

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_message

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


def acceptance(claim: Claim, wamid: str, *, unknown: int = 0, had: bool = False) -> Acceptance:
    """The provider's answer to a claimed attempt, as a drain's batch records it."""
    return Acceptance(
        claim.message_id,
        claim.cycle,
        claim.attempt,
        claim.identity_id,
        wamid,
        200,
        '{"ok":1}',
        unknown,
        had,
    )


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


def stored(database: Database, incoming: IncomingStatus) -> Recorded:
    """The webhook view's first step: the delivery and its status committed, not applied."""
    with database.transaction() as session:
        return record_delivery(
            session,
            provider="whatsapp",
            identity_id=incoming.identity_id,
            headers={},
            body="{}",
            now=T1,
            statuses=[incoming],
        )


def deliver(database: Database, incoming: IncomingStatus) -> dict[str, int]:
    """The webhook view's path: the delivery and its status committed, then applied."""
    return apply_recorded(database, stored(database, incoming), T1)


@contextmanager
def impatient(database: Database) -> Iterator[Session]:
    """A transaction that fails rather than wait more than two seconds for a row lock."""
    with database.transaction() as session:
        session.execute(text("SET LOCAL lock_timeout = '2s'"))
        yield session


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
