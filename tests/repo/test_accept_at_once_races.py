"""The one-statement acceptance (`accept_at_once`) against what runs beside it, on real
PostgreSQL with real commits: a webhook status for the same provider id, a re-claim
after a lost lease, another identity's status, a second provider id. Each interleaving
is ordered explicitly: a thread waits on an event, or until another backend is seen
waiting on a row lock (a condition, polled; never a duration)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from app.db import Database
from app.models import Attempt, MessageEvent, WebhookStatus
from app.reconcile import apply_recorded, record_delivery
from app.repo.acceptance import accept_at_once
from app.repo.attempts import mark_lost_attempt
from app.repo.claims import claim_message
from app.repo.requeues import requeue_from_dashboard
from app.repo.status_apply import apply_stored_status
from jobs.record import record_outcome

from ..conftest import T0
from ..factories import make_world
from .acceptance_steps import (
    CONFIG,
    LEASE,
    T1,
    WAIT,
    Runner,
    accepted,
    claimed,
    deliver,
    in_its_second_cycle,
    message_row,
    status,
    wait_until_blocked,
)


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
