"""Web and worker as separate processes sharing one PROMETHEUS_MULTIPROC_DIR, as `make run`
and one host of a deployment run them: the sends a worker process made, and the webhooks
either gunicorn worker received, show up in every scrape of the web."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.models import Message

from ..conftest import METRICS_AUTH, METRICS_TOKEN, PG_URL, SECRET_KEY, free_port
from .conftest import Env
from .processes import die_with_parent, start
from .scrape import Scrape

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = [sys.executable, "-m", "gunicorn", "--workers", "2", "--no-control-socket"]
RECIPIENTS = ("15551240001", "15551240002", "15551240003")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.slow
def test_counts_from_a_worker_process_show_up_in_the_web_processes_scrape(
    env: Env, tmp_path: Path
) -> None:
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    port = free_port()
    web_url = f"http://127.0.0.1:{port}"
    process_env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": env.config.redis_url,
        "SECRET_KEY": SECRET_KEY,
        "PUBLIC_BASE_URL": web_url,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "RATCHET_METRICS_TOKEN": METRICS_TOKEN,
        "RATCHET_PROVIDER_TIMEOUT": "3",
    }
    number = env.number(webhook_url=f"{web_url}/webhooks/whatsapp")
    with (tmp_path / "web.log").open("w") as log:
        web = subprocess.Popen(
            [*GUNICORN, "--bind", f"127.0.0.1:{port}", "wsgi:app"],
            cwd=ROOT,
            env=process_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            start_new_session=True,
        )
    worker = start("worker", ["worker", "--lane", "campaign"], process_env, tmp_path)
    try:
        with httpx.Client(base_url=web_url, timeout=10) as client:
            wait_for(client, "/healthz", tmp_path / "web.log")
            ids = []
            for to in RECIPIENTS:
                response = client.post(
                    "/v1/messages",
                    json={"identity_id": number["identity_id"], "to": to, "text": "hello"},
                    headers={"Authorization": f"Bearer {number['api_key']}"},
                )
                assert response.status_code == 201, response.text
                ids.append(response.json()["id"])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all_read(env, ids):
                time.sleep(0.2)
            assert all_read(env, ids), (tmp_path / "worker.log").read_text()
            env.settle(number)
            posted = env.sandbox("GET", f"/webhooks?phone_number_id={number['phone_number_id']}")
            deliveries = len(posted["webhooks"])
            assert deliveries >= len(RECIPIENTS) * 3  # sent, delivered, read for each

            # Each scrape is answered by one of the two gunicorn workers, whichever is free;
            # every one sees the worker process's sends and both web workers' webhooks.
            for _ in range(6):
                response = client.get("/metrics", headers=METRICS_AUTH)
                assert response.status_code == 200
                scrape = Scrape(response.text)
                sends = scrape.value("ratchet_sends_total", outcome="accepted", lane="campaign")
                assert sends == len(RECIPIENTS)
                assert scrape.value("ratchet_provider_latency_seconds_count") == len(RECIPIENTS)
                assert scrape.value("ratchet_webhooks_received_total") == deliveries
                assert scrape.value("ratchet_webhook_statuses_total") == len(RECIPIENTS) * 3
                assert scrape.value("ratchet_database_up") == 1
        # One file per process and kind: the worker's and the web workers' own.
        assert len({path.name.rsplit("_", 1)[-1] for path in metrics_dir.glob("*.db")}) >= 2
    finally:
        stop(worker)
        stop(web)


def all_read(env: Env, ids: list[int]) -> bool:
    with env.db.transaction() as session:
        states = session.scalars(select(Message.status).where(Message.id.in_(ids))).all()
    return len(states) == len(ids) and all(state == "read" for state in states)


def wait_for(client: httpx.Client, path: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if client.get(path).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{path} did not answer: {log.read_text()}")
