"""The body limits hold however the body is framed: chunked bodies through a real gunicorn.

Werkzeug's test client always sends a Content-Length, and gunicorn (which sets
`wsgi.input_terminated`) is what hands the app a chunked body without one, so these tests
start the production server as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from app.db import Database
from app.models import Message, WebhookDelivery

from ..conftest import REDIS_URL, SECRET_KEY, T0, free_port
from ..factories import World, make_world
from ..meta import PHONE_NUMBER_ID, encode, sign, status, status_body

ROOT = Path(__file__).resolve().parents[2]
APP_SECRET = "chunked-app-secret"
KIB = 1024


@pytest.fixture
def server(pg_url: str, committed_db: Database, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": pg_url, "REDIS_URL": REDIS_URL, "SECRET_KEY": SECRET_KEY}
    log = (tmp_path / "gunicorn.log").open("w")
    command = [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}"]
    process = subprocess.Popen(
        [*command, "--workers", "1", "--no-control-socket", "wsgi:app"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "gunicorn.log").read_text()
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "gunicorn.log").read_text()
            time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture
def world(committed_db: Database) -> World:
    return make_world(committed_db, account_id=PHONE_NUMBER_ID, app_secret=APP_SECRET)


def chunked(data: bytes, size: int = 8 * KIB) -> Iterator[bytes]:
    """A generator body: httpx sends it with `Transfer-Encoding: chunked`, no length."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def send_api(base_url: str, world: World, data: bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {world.api_key}", "Content-Type": "application/json"}
    return httpx.post(f"{base_url}/v1/messages", content=chunked(data), headers=headers, timeout=30)


def send_webhook(base_url: str, data: bytes, signature: str) -> httpx.Response:
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": signature}
    return httpx.post(
        f"{base_url}/webhooks/whatsapp", content=chunked(data), headers=headers, timeout=30
    )


def api_body(world: World, text: str, **extra: object) -> bytes:
    body = {"identity_id": world.identity_id, "to": "+15551234567", "text": text, **extra}
    return json.dumps(body).encode()


def time_of(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def count(database: Database, model: type) -> int:
    with database.transaction() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


@pytest.mark.slow
def test_a_chunked_api_body_over_64_kib_is_413_and_stores_nothing(
    server: str, world: World, committed_db: Database
) -> None:
    # Padding in an unknown field: were the body read whole, it would still be refused, so
    # only the size limit can explain a 413.
    data = api_body(world, "hi", pad="x" * (92 * KIB))
    response = send_api(server, world, data)
    assert response.status_code == 413, response.text
    assert "too large" in response.json()["error"]
    assert count(committed_db, Message) == 0


@pytest.mark.slow
def test_a_chunked_api_body_just_over_the_limit_is_413_not_a_truncated_parse(
    server: str, world: World, committed_db: Database
) -> None:
    # Valid JSON whose first 64 KiB are also a valid request would be accepted if the body
    # were silently cut at the limit: the text pushes it one byte over.
    data = api_body(world, "hi")
    data = data + b" " * (64 * KIB + 1 - len(data))
    response = send_api(server, world, data)
    assert response.status_code == 413, response.text
    assert count(committed_db, Message) == 0


@pytest.mark.slow
def test_a_small_chunked_api_body_still_creates_the_message(
    server: str, world: World, committed_db: Database
) -> None:
    response = send_api(server, world, api_body(world, "hello over chunks"))
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "queued"
    assert count(committed_db, Message) == 1


@pytest.mark.slow
def test_a_chunked_webhook_over_1_mib_is_413_and_stores_nothing(
    server: str, world: World, committed_db: Database
) -> None:
    body = status_body([status("wamid.BIG", "sent", time_of(1))])
    body["pad"] = "x" * (KIB * KIB + 16 * KIB)
    data = encode(body)
    response = send_webhook(server, data, sign(data, APP_SECRET))
    assert response.status_code == 413, response.text
    assert count(committed_db, WebhookDelivery) == 0


@pytest.mark.slow
def test_a_small_chunked_webhook_is_verified_and_stored(
    server: str, world: World, committed_db: Database
) -> None:
    data = encode(status_body([status("wamid.SMALL", "sent", time_of(1))]))
    response = send_webhook(server, data, sign(data, APP_SECRET))
    assert response.status_code == 200, response.text
    assert count(committed_db, WebhookDelivery) == 1
