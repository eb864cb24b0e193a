"""Requeue (the one backward edge), the sweeper after a lost Redis, and dead letters."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import timedelta

import pytest
from redis import Redis
from rq import Queue, SimpleWorker

from app import demo
from app.clock import utcnow
from app.lifecycle import Status, is_terminal
from app.repo.queue import dead_letters
from app.repo.windows import is_window_open
from jobs.queues import queue_name
from jobs.sweep import sweep_once

from .conftest import Env


def requeue(env: Env, message_id: int, *args: str):
    result = env.app.test_cli_runner().invoke(
        args=["message", "requeue", str(message_id), "--by", "ana", *args]
    )
    return result


@pytest.mark.slow
def test_an_exhausted_message_after_timeouts_is_requeued_under_the_same_key(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15550000013")
    env.drive(number, message_id)
    assert env.message(message_id).failure_class == "exhausted"
    result = requeue(env, message_id)
    assert result.exit_code == 0, result.output
    assert "as cycle 2, under the same provider key" in result.output
    env.attempt(message_id)
    keys = {r["idempotency_key"] for r in env.requests(number)}
    assert len(env.requests(number)) == 6 and len(keys) == 1


@pytest.mark.slow
def test_a_rejected_message_is_requeued_under_the_new_cycles_key(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15550000005")
    env.drive(number, message_id)
    result = requeue(env, message_id)
    assert "under a new provider key" in result.output
    env.attempt(message_id)
    first, second = env.requests(number)
    assert first["idempotency_key"] != second["idempotency_key"]
    row = env.message(message_id)
    assert (row.status, row.cycle, row.attempt) == ("failed", 2, 1)


@pytest.mark.slow
def test_a_requeued_message_answered_with_its_old_id_by_a_deduping_provider_moves_forward(
    env: Env,
) -> None:
    env.config = dataclasses.replace(env.config, cap_unknown=1)
    number = env.number(honour_idempotency_keys=True, statuses=[])
    message_id = env.send(number, "15550000001")
    # The one unknown outcome, then its verdict once the webhook grace has passed.
    assert len(env.drive(number, message_id)) == 2
    failed = env.message(message_id)
    assert (failed.status, failed.failure_class, failed.had_unknown_outcome) == (
        "failed",
        "exhausted",
        True,
    )
    assert requeue(env, message_id).exit_code == 0
    env.attempt(message_id)
    row = env.message(message_id)
    (accepted,) = env.accepted(number)
    assert (row.status, row.cycle, row.provider_message_id) == ("sent", 2, accepted["wamid"])
    assert [r["outcome"] for r in env.requests(number)] == ["accepted", "replayed"]


@pytest.mark.slow
def test_requeue_is_refused_for_anything_not_failed(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15551230100")
    result = requeue(env, message_id)
    assert result.exit_code != 0 and "not failed" in result.output


@pytest.mark.slow
def test_after_a_redis_flush_the_sweeper_alone_brings_every_message_to_an_end(
    env: Env,
) -> None:
    config = dataclasses.replace(env.config, webhook_grace=0.3)
    env.app.config["RATCHET"] = config
    env.config = config
    number = env.number()
    recipients = [
        "15551231000",
        "15551231001",
        "15551231002",
        "15550000003",
        "15550000004",
        "15550000005",
    ]
    redis = Redis.from_url(config.redis_url)
    queue = Queue(queue_name("campaign"), connection=redis)
    ids = [env.send(number, to) for to in recipients[3:]]
    # A worker's drain sends those three: two fail for now, and the drain rings itself
    # for the earliest of their retries.
    SimpleWorker([queue], connection=redis).work(burst=True)
    assert queue.scheduled_job_registry.count == 1
    ids = [env.send(number, to) for to in recipients[:3]] + ids
    recipients = recipients[:3] + recipients[3:]
    assert queue.count == 1  # one drain rung for the three, not yet run
    redis.flushdb()  # FLUSHDB of Ratchet's database: FLUSHALL would hit other runs' too
    assert queue.count == 0 and queue.scheduled_job_registry.count == 0

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        sweep_once(env.db, config, utcnow())
        # No scheduler: only what the sweeper rang is on the queue.
        SimpleWorker([queue], connection=redis).work(burst=True, with_scheduler=False)
        env.settle(number, quiet=0.2)
        if all(is_terminal(Status(env.message(i).status)) for i in ids):
            break
        time.sleep(0.2)
    redis.close()
    states = {to: env.message(i).status for to, i in zip(recipients, ids, strict=True)}
    assert states == {
        "15551231000": "read",
        "15551231001": "read",
        "15551231002": "read",
        "15550000003": "read",
        "15550000004": "read",
        "15550000005": "failed",
    }
    assert len(env.accepted(number)) == 5  # each accepted once


@pytest.mark.slow
def test_the_sweeper_skips_paused_identities(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15551232000")
    env.app.test_cli_runner().invoke(
        args=["identity", "pause", str(number["identity_id"]), "--reason", "maintenance"]
    )
    later = utcnow() + timedelta(minutes=5)
    assert sweep_once(env.db, env.config, later).rung == 0
    env.app.test_cli_runner().invoke(args=["identity", "resume", str(number["identity_id"])])
    assert env.message(message_id).status == "queued"


@pytest.mark.slow
def test_dead_letters_list_the_actionable_ones_first(env: Env) -> None:
    number = env.number()
    env.config = dataclasses.replace(env.config, cap_unknown=1)
    order = {}
    for to in ("15550000005", "15550000008", "15550000006", "15550000013"):
        order[to] = env.send(number, to)
        env.drive(number, order[to])
    with env.db.transaction() as session:
        letters = dead_letters(session)
    assert [(d.message_id, d.failure_class, d.code) for d in letters] == [
        (order["15550000013"], "exhausted", None),
        (order["15550000008"], "needs_human", 132015),
        (order["15550000006"], "permanent", 131047),
        (order["15550000005"], "permanent", 131026),
    ]
    output = env.app.test_cli_runner().invoke(args=["message", "dead-letters"]).output
    assert "4 dead letters" in output and "132015" in output
    only = (
        env.app.test_cli_runner()
        .invoke(args=["message", "dead-letters", "--class", "permanent"])
        .output
    )
    assert "2 dead letters" in only


@pytest.mark.slow
def test_the_demo_trickle_sends_campaigns_and_replies_to_customers_who_wrote_in(
    env: Env,
) -> None:
    login = demo.seed(env.db, env.box, env.sandbox_url, env.base_url)
    stop = threading.Event()
    rung: list[tuple[int, str]] = []
    identities: set[int] = set()

    def ring(message_id: int, lane: str, identity_id: int) -> bool:
        rung.append((message_id, lane))
        identities.add(identity_id)
        if len(rung) >= len(demo.TRICKLE):
            stop.set()
        return True

    worker = threading.Thread(
        target=demo.trickle, args=(env.db, env.sandbox_url, login, stop, 0.05, ring)
    )
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    lanes = {lane for _, lane in rung}
    assert lanes == {"reply", "campaign"} and len(rung) == len(demo.TRICKLE)
    # The demo's traffic goes out through its WhatsApp and its Twilio identity.
    assert login.twilio_identity_id and identities == {
        login.identity_id,
        login.twilio_identity_id,
    }
    replies = [env.message(i) for i, lane in rung if lane == "reply"]
    with env.db.transaction() as session:
        for reply in replies:
            # The customer wrote in first: the window is open for the reply.
            assert is_window_open(session, login.identity_id, reply.recipient, utcnow())
