"""The workers page and the overview's strip, read from RQ's own registry: real RQ workers
register their birth (and death) in Redis, as `flask worker` does when it starts and stops."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from redis import Redis
from rq import SimpleWorker

from app.db import Database
from jobs.alerts import AlertEvaluator
from jobs.drain import drain
from jobs.queues import get_queue, get_redis
from jobs.registry import read_live_by_lane

from ..factories import make_message
from .dashboard_world import NOW, Tenants, make_staff, sign_in, use_clock


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


@pytest.fixture
def redis(app: Flask) -> Iterator[Redis]:
    yield get_redis()


def start_worker(redis: Redis, lane: str, name: str) -> SimpleWorker:
    """A worker as `flask worker --lane` starts it, registered in RQ's registry."""
    worker = SimpleWorker([get_queue(lane, redis)], connection=redis, name=name)
    worker.register_birth()
    worker.set_state("idle")
    return worker


def run_drain(redis: Redis, worker: SimpleWorker, identity_id: int, lane: str) -> None:
    """The worker picks up a drain job: RQ records it as the worker's current job."""
    job = get_queue(lane, redis).enqueue(drain, identity_id, lane, "token")
    worker.set_state("busy")
    worker.set_current_job_id(job.id)


def text(client: FlaskClient, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.get_data(as_text=True)


def test_the_workers_page_lists_each_live_worker_with_its_lane_host_pid_state_and_drain(
    client: FlaskClient, redis: Redis, tenants: Tenants
) -> None:
    replying = start_worker(redis, "reply", "reply-1")
    start_worker(redis, "campaign", "campaign-1")
    run_drain(redis, replying, tenants.acme.identity_id, "reply")
    page = text(client, "/workers")
    assert "reply-1" in page and "campaign-1" in page
    assert replying.hostname is not None and replying.hostname in page
    assert f">{replying.pid}<" in page
    assert ">busy<" in page and ">idle<" in page
    assert "drain of whatsapp <code>…0001</code> / reply" in page
    assert "NO WORKER" not in page


def test_a_worker_that_stopped_leaves_the_list_and_its_lane_with_due_messages_turns_red(
    client: FlaskClient, db: Database, redis: Redis, tenants: Tenants
) -> None:
    start_worker(redis, "reply", "reply-1")
    stopping = start_worker(redis, "campaign", "campaign-1")
    make_message(db, tenants.acme, lane="campaign", now=NOW - timedelta(seconds=5))
    assert "NO WORKER" not in text(client, "/")
    stopping.register_death()
    overview = text(client, "/")
    assert "NO WORKER" in overview
    assert "<strong>campaign</strong>: no live worker, 1 due" in overview
    workers = text(client, "/workers")
    assert "campaign-1" not in workers and "reply-1" in workers
    # The reply lane has a worker and nothing due: not red.
    assert "<strong>reply</strong>: no live worker" not in workers


def test_a_lane_with_nothing_due_and_no_worker_is_not_red(
    client: FlaskClient, redis: Redis
) -> None:
    page = text(client, "/workers")
    assert "No worker is registered" in page
    assert "NO WORKER" not in page


def test_another_tenants_drain_is_named_only_as_another_tenants(
    client: FlaskClient, redis: Redis, tenants: Tenants
) -> None:
    worker = start_worker(redis, "campaign", "campaign-1")
    run_drain(redis, worker, tenants.other.identity_id, "campaign")
    page = text(client, "/workers")
    assert "another tenant's drain" in page
    assert "…0002" not in page


def fire_alerts(app: Flask, db: Database, redis: Redis) -> None:
    """One evaluator pass as the sweeper makes it: RQ's registry read first."""
    config = dataclasses.replace(app.config["RATCHET"], stuck_after=60.0)
    evaluator = AlertEvaluator(db, config, workers=lambda: read_live_by_lane(redis))
    evaluator.run(NOW)
    evaluator.close()


def test_the_stuck_alert_names_a_lane_without_a_live_worker_as_its_cause(
    app: Flask, client: FlaskClient, db: Database, redis: Redis, tenants: Tenants
) -> None:
    start_worker(redis, "reply", "reply-1")
    make_message(db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=5))
    fire_alerts(app, db, redis)
    page = text(client, "/")
    assert "Queue stuck" in page
    assert "no live worker on the campaign lane: start one (see Workers)" in page


def test_the_stuck_alert_says_a_live_worker_claimed_nothing_when_one_is_registered(
    app: Flask, client: FlaskClient, db: Database, redis: Redis, tenants: Tenants
) -> None:
    start_worker(redis, "campaign", "campaign-frozen")
    make_message(db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=5))
    fire_alerts(app, db, redis)
    page = text(client, "/")
    assert "1 live worker on the campaign lane claimed nothing" in page
    assert "no live worker" not in page
