"""32 concurrent requests with one idempotency key, over real HTTP, on real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from flask import Flask
from sqlalchemy import func, select
from werkzeug.serving import make_server

from app.db import Database
from app.models import Message

from ..conftest import POLL
from ..factories import World, make_world

REQUESTS = 32


@pytest.fixture
def base_url(app: Flask, committed_db: Database) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.port}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def fire(base_url: str, world: World, bodies: list[dict[str, object]]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(bodies))
    headers = {"Authorization": f"Bearer {world.api_key}", "Idempotency-Key": "same-key"}

    def send(body: dict[str, object]) -> httpx.Response:
        with httpx.Client(timeout=60) as client:
            barrier.wait(timeout=30)
            return client.post(f"{base_url}/v1/messages", json=body, headers=headers)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(send, bodies))


def rows(database: Database) -> int:
    with database.transaction() as session:
        return session.scalar(select(func.count()).select_from(Message)) or 0


@pytest.mark.slow
def test_one_key_and_one_body_sent_32_times_at_once_makes_one_message(
    base_url: str, committed_db: Database
) -> None:
    world = make_world(committed_db)
    body = {"identity_id": world.identity_id, "to": "+15551234567", "text": "once"}
    responses = fire(base_url, world, [body] * REQUESTS)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (REQUESTS - 1) + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert rows(committed_db) == 1


@pytest.mark.slow
def test_one_key_with_32_different_bodies_makes_one_message_and_31_conflicts(
    base_url: str, committed_db: Database
) -> None:
    world = make_world(committed_db)
    bodies = [
        {"identity_id": world.identity_id, "to": "15551234567", "text": f"body {n}"}
        for n in range(REQUESTS)
    ]
    responses = fire(base_url, world, bodies)
    created = [r for r in responses if r.status_code == 201]
    conflicts = [r for r in responses if r.status_code == 422]
    assert len(created) == 1 and len(conflicts) == REQUESTS - 1
    assert {r.json()["existing_id"] for r in conflicts} == {created[0].json()["id"]}
    assert rows(committed_db) == 1
