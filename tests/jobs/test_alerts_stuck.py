"""The stuck-queue alert: each cause fires at the first evaluation whose `now` is past the
threshold; a paced backlog and a scheduled retry do not; progress clears it. Real
PostgreSQL, Redis, RQ workers and the sandbox; the evaluator's `now` is passed in."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from redis import Redis

from app.clock import utcnow
from app.models import Identity
from app.repo.alerts import firing_alerts
from app.repo.identities import pause_identity
from jobs.alerts import AlertEvaluator
from jobs.ringing import ring_identity
from jobs.sweep import run_sweeper

from ..conftest import PG_URL, SECRET_KEY, free_port, make_app
from ..factories import World, make_message
from .alert_states import THRESHOLD, firing, queued_at, work_campaign_lane, writes_refused
from .conftest import Env
from .processes import is_stopped

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def evaluator(env: Env) -> Iterator[AlertEvaluator]:
    config = dataclasses.replace(env.config, stuck_after=THRESHOLD)
    made = AlertEvaluator(env.db, config)
    yield made
    made.close()


def assert_fires_just_past_the_threshold(
    env: Env, evaluator: AlertEvaluator, key: str, since: datetime
) -> None:
    evaluator.run(since + timedelta(seconds=THRESHOLD - 1))
    assert key not in firing(env)
    evaluator.run(since + timedelta(seconds=THRESHOLD + 1))
    assert key in firing(env)


def test_it_fires_when_the_workers_are_stopped_and_clears_when_they_return(
    env: Env, evaluator: AlertEvaluator
) -> None:
    number = env.number()
    message_id = env.send(number, "15551230001")  # rung; no worker runs
    key = f"stuck:{number['identity_id']}:campaign"
    assert_fires_just_past_the_threshold(env, evaluator, key, queued_at(env, message_id))

    work_campaign_lane()  # the workers are back
    assert env.message(message_id).status in ("sent", "delivered", "read")
    evaluator.run(utcnow() + timedelta(seconds=THRESHOLD + 2))
    assert key not in firing(env)


def test_it_fires_for_a_worker_hung_holding_a_lease(env: Env, evaluator: AlertEvaluator) -> None:
    number = env.number()
    held = env.send(number, "15551230002")
    waiting = env.send(number, "15551230003")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.jobs.paused_worker", str(held)],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": PG_URL,
            "REDIS_URL": env.config.redis_url,
            "SECRET_KEY": SECRET_KEY,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not is_stopped(child.pid):  # SIGSTOP between its claim and its call
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        claimed = env.message(held).last_attempt_at
        assert claimed is not None and env.message(held).lease_until is not None
        key = f"stuck:{number['identity_id']}:campaign"
        assert env.message(waiting).status == "queued"
        assert_fires_just_past_the_threshold(env, evaluator, key, claimed)
    finally:
        child.kill()
        child.send_signal(signal.SIGCONT)
        child.wait(timeout=30)


def test_it_fires_when_redis_is_flushed(env: Env, evaluator: AlertEvaluator) -> None:
    number = env.number()
    message_id = env.send(number, "15551230004")
    redis = Redis.from_url(env.config.redis_url)
    redis.flushdb()  # the ring is lost
    redis.close()
    work_campaign_lane()  # a worker finds nothing to do
    assert env.message(message_id).status == "queued"
    key = f"stuck:{number['identity_id']}:campaign"
    assert_fires_just_past_the_threshold(env, evaluator, key, queued_at(env, message_id))


def test_the_sweeper_evaluates_the_alerts_while_redis_is_down(env: Env, pg_url: str) -> None:
    number = env.number()
    message_id = env.send(number, "15551230005")
    since = queued_at(env, message_id)
    dead = make_app(pg_url, f"redis://127.0.0.1:{free_port()}/0", stuck_after=THRESHOLD)
    dead.extensions["ratchet.db"].dispose()
    config = dead.config["RATCHET"]
    lines: list[str] = []
    try:
        with dead.app_context():
            run_sweeper(
                env.db,
                config,
                lambda: since + timedelta(seconds=THRESHOLD + 1),
                once=True,
                report=lines.append,
            )
    finally:
        dead.extensions["ratchet.redis"].close()
        # The sweeper's rings read the shards through the app's own database.
        dead.extensions["ratchet.db"].dispose()
    assert any("could not reach Redis" in line for line in lines), lines
    assert f"stuck:{number['identity_id']}:campaign" in firing(env)


def test_a_paused_identity_raises_the_paused_alert_alone_not_a_stuck_queue_too(
    env: Env, evaluator: AlertEvaluator
) -> None:
    number = env.number()
    message_id = env.send(number, "15551230006")
    with env.db.transaction() as session:
        pause_identity(session, number["identity_id"], "operator: carrier audit", utcnow())
    work_campaign_lane()  # the drain claims nothing for a paused identity
    assert env.message(message_id).status == "queued"
    evaluator.run(queued_at(env, message_id) + timedelta(seconds=THRESHOLD * 3))
    # One cause, one alert (an expired token used to raise three: paused and both lanes).
    assert firing(env) == {f"paused:{number['identity_id']}"}


def test_it_fires_when_the_database_refuses_writes_and_stores_it_once_it_can(
    env: Env, evaluator: AlertEvaluator, caplog: pytest.LogCaptureFixture
) -> None:
    number = env.number()
    message_id = env.send(number, "15551230007")
    since = queued_at(env, message_id)
    key = f"stuck:{number['identity_id']}:campaign"
    fired_at = since + timedelta(seconds=THRESHOLD + 1)
    with writes_refused(env):
        work_campaign_lane()  # the drain's claim is refused
        assert env.message(message_id).status == "queued"
        evaluator.run(since + timedelta(seconds=THRESHOLD - 1))
        assert key not in evaluator.unrecorded
        evaluator.run(fired_at)
        assert key in evaluator.unrecorded  # fired, not storable yet
        assert firing(env) == set()
    assert any("ALERT firing: Queue stuck" in r.getMessage() for r in caplog.records)
    evaluator.run(fired_at + timedelta(seconds=5))  # writes work again
    assert evaluator.unrecorded == {}
    with env.db.transaction() as session:
        (alert,) = [a for a in firing_alerts(session) if a.alert_key == key]
    assert alert.fired_at == fired_at  # when it fired, not when it could be written
    assert alert.fired_figures["due"] == 1


def test_a_paced_backlog_does_not_fire(env: Env, tmp_path: Path) -> None:
    number = env.number()
    with env.db.transaction() as session:
        identity = session.get(Identity, number["identity_id"])
        assert identity is not None
        identity.campaign_rate = 4.0
        world = World(identity.tenant_id, number["api_key"], identity.id)
    # A backlog whose oldest message has waited ten minutes, draining at its pace.
    queued = utcnow() - timedelta(minutes=10)
    ids = [
        make_message(env.db, world, recipient=f"155512320{n:02d}", now=queued) for n in range(40)
    ]
    assert ring_identity(world.identity_id, "campaign", env.config)
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "wsgi", "worker", "--lane", "campaign"],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": PG_URL,
            "REDIS_URL": env.config.redis_url,
            "SECRET_KEY": SECRET_KEY,
            "RATCHET_DRAIN_SLICE": "1",
        },
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    config = dataclasses.replace(env.config, stuck_after=THRESHOLD)
    evaluator = AlertEvaluator(env.db, config)
    try:
        deadline = time.monotonic() + 60
        while sum(env.message(i).status != "queued" for i in ids) < 8:
            assert worker.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        # Seen from a minute later than the oldest was queued, the backlog is old; but
        # the lane claimed moments ago, so it is draining, not stuck.
        outcome = evaluator.run(utcnow())
    finally:
        evaluator.close()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        log.close()
    key = f"stuck:{number['identity_id']}:campaign"
    assert key not in outcome.fired and key not in firing(env)
    assert sum(env.message(i).status == "queued" for i in ids) > 0  # still a backlog


def test_a_scheduled_retry_does_not_fire(env: Env, evaluator: AlertEvaluator) -> None:
    number = env.number()
    threshold = 5.0  # this identity's own, shorter than the webhook grace the retry waits
    with env.db.transaction() as session:
        identity = session.get(Identity, number["identity_id"])
        assert identity is not None
        identity.stuck_after = threshold
    message_id = env.send(number, "15550000003")  # 503 twice, then accepts
    env.now = queued_at(env, message_id) + timedelta(seconds=1)
    assert env.attempt(message_id).startswith("retry at")
    retry_at = env.message(message_id).next_attempt_at
    assert retry_at is not None
    key = f"stuck:{number['identity_id']}:campaign"
    # Long past the threshold since it was queued and claimed, but its retry is not due.
    evaluator.run(retry_at - timedelta(seconds=1))
    assert retry_at - timedelta(seconds=1) - env.now > timedelta(seconds=threshold)
    assert key not in firing(env)
    # Once due and unclaimed for the threshold, it is stuck.
    evaluator.run(retry_at + timedelta(seconds=threshold + 1))
    assert key in firing(env)


def test_an_episode_another_evaluator_stored_first_is_left_to_it(
    env: Env, evaluator: AlertEvaluator
) -> None:
    number = env.number()
    since = queued_at(env, env.send(number, "15551230008"))
    key = f"stuck:{number['identity_id']}:campaign"
    at = since + timedelta(seconds=THRESHOLD + 1)
    with writes_refused(env):
        evaluator.run(at)  # fired, kept in memory
    assert key in evaluator.unrecorded
    other = AlertEvaluator(env.db, evaluator.config)
    try:
        other.run(at + timedelta(seconds=1))  # a second sweeper stores it first
    finally:
        other.close()
    evaluator.run(at + timedelta(seconds=2))
    assert evaluator.unrecorded == {}
    with env.db.transaction() as session:
        assert [a.alert_key for a in firing_alerts(session)].count(key) == 1
