"""A drain records its provider's acceptances a batch at a time: one statement for the
moves, attempts and events of every acceptance that ended together, and one for the
statuses parked for their ids (`app/repo/accept_batch.py`), where each acceptance had
two statements of its own (`accept_at_once`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import event, select, text

from app.models import Attempt, MessageEvent
from jobs.call import record_batch
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env
from .drain_runs import called_batch

CALLS = 16


def test_a_drains_acceptances_are_recorded_a_batch_at_a_time(env: Env) -> None:
    # Answers 300 ms late: the calls, begun together, mostly end together.
    number = env.number(statuses=[], rate_limit_mps=None, answer_delay_ms=300)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=1000.0, total_rate=1000.0)
    ids = [env.send(number, f"155571400{n:02d}", lane="campaign") for n in range(CALLS)]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "batches", px=60_000)
    config = dataclasses.replace(env.config, drain_batch=CALLS, drain_concurrency=CALLS)
    sent: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(" ".join(statement.split()))

    event.listen(env.db.engine, "before_cursor_execute", on_execute)
    try:
        summary = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign").run(
            "batches"
        )
    finally:
        event.remove(env.db.engine, "before_cursor_execute", on_execute)

    assert f"{CALLS} accepted" in summary, summary
    assert [env.message(i).status for i in ids] == ["sent"] * CALLS
    batches = [s for s in sent if s.startswith("WITH given AS")]
    alone = [s for s in sent if s.startswith("WITH moved AS")]
    parked_alone = [s for s in sent if "webhook_statuses.provider_message_id = %(" in s]
    assert alone == [] and parked_alone == [], (alone, parked_alone)
    assert 1 <= len(batches) <= CALLS


def test_an_earlier_attempts_answer_in_the_same_batch_is_recorded_the_general_way(
    env: Env,
) -> None:
    """Found by a review: the batch's moves were matched on message and cycle alone, so the
    answer of an attempt whose lease was taken over, recorded in the batch of the attempt
    that took it over, was counted `sent` and never written: no `double_send` flagged,
    though the provider had the message twice. A message twice in a batch is now recorded
    the general way, as it was one call at a time."""
    number = env.number(statuses=[], rate_limit_mps=None)
    message_id = env.send(number, "15557150001", lane="campaign")
    [first] = called_batch(env, number["identity_id"])
    claim = first.prepared.claim
    # The lease lapsed and another worker's attempt took the message and was answered too.
    later = dataclasses.replace(claim, attempt=claim.attempt + 1)
    with env.db.transaction() as session:
        session.execute(
            text("UPDATE messages SET attempt = :a WHERE id = :id"),
            {"a": later.attempt, "id": message_id},
        )
        session.execute(
            text(
                "INSERT INTO attempts (message_id, cycle, number, provider_key, started_at) "
                "VALUES (:id, :c, :a, 'key-again', now())"
            ),
            {"id": message_id, "c": claim.cycle, "a": later.attempt},
        )
    assert first.result is not None
    again_result = dataclasses.replace(first.result, provider_message_id="wamid.AGAIN")
    again = dataclasses.replace(
        first, prepared=dataclasses.replace(first.prepared, claim=later), result=again_result
    )

    recorded = record_batch(env.db, env.config, [first, again], env.clock)

    # As one at a time: the earlier answer is kept late, the later one flagged beside it.
    outcomes = [outcome for _, outcome, _ in recorded]
    assert outcomes == ["accepted late (sent): the lease had been taken over", "accepted (kept)"]
    message = env.message(message_id)
    assert (message.status, message.provider_message_id) == (
        "sent",
        first.result.provider_message_id,
    )
    with env.db.transaction() as session:
        kinds = session.scalars(
            select(MessageEvent.kind).where(MessageEvent.message_id == message_id)
        ).all()
        first_row = session.scalars(
            select(Attempt.provider_message_id).where(
                Attempt.message_id == message_id, Attempt.number == claim.attempt
            )
        ).one()
    assert "double_send" in kinds
    assert first_row == first.result.provider_message_id
