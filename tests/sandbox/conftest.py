"""Fixtures: the sandbox as its own process, a client for it, and a webhook receiver.

The sandbox runs as a separate process (``python -m app.sandbox --port 0``), as in the demo,
so these tests also prove it starts, announces its port and stops cleanly.
"""

import ctypes
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from .support import TEST_APP_SECRET, wait_until

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 15


@dataclass
class SandboxProcess:
    process: subprocess.Popen[str]
    url: str
    stderr_path: Path


def _die_with_parent() -> None:
    """If pytest is killed, the sandbox goes with it (Linux's PR_SET_PDEATHSIG = 1)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def start_sandbox_process(stderr_path: Path) -> SandboxProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.sandbox", "--port", "0"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            preexec_fn=_die_with_parent,
        )
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=STARTUP_SECONDS):
            process.kill()
            process.communicate()
            raise AssertionError(f"sandbox did not start: {stderr_path.read_text()}")
    line = process.stdout.readline().strip()
    prefix = "sandbox listening on "
    if not line.startswith(prefix):
        process.kill()
        process.communicate()
        raise AssertionError(f"unexpected first line {line!r}: {stderr_path.read_text()}")
    return SandboxProcess(process, line.removeprefix(prefix), stderr_path)


def stop_sandbox_process(sandbox: SandboxProcess, sig: int | None = None) -> tuple[int, str]:
    """Stop it with sig (default SIGTERM); returns (exit code, everything else it wrote)."""
    if sig is None:
        sandbox.process.terminate()
    else:
        sandbox.process.send_signal(sig)
    stdout, _ = sandbox.process.communicate(timeout=15)
    return sandbox.process.returncode, stdout + sandbox.stderr_path.read_text()


@pytest.fixture(scope="session")
def sandbox_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    sandbox = start_sandbox_process(tmp_path_factory.mktemp("sandbox") / "stderr.log")
    yield sandbox
    code, output = stop_sandbox_process(sandbox)
    assert code == 0, output
    assert "Traceback" not in output, output


class SandboxClient:
    """Raw HTTP to the sandbox: the control API and the Cloud API send endpoint."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10)

    def register(self, webhook_url: str, **settings: Any) -> dict[str, Any]:
        body = {
            "phone_number_id": f"1065{uuid.uuid4().int % 10**11:011d}",
            "token": "EAAG-test-token",
            "app_secret": TEST_APP_SECRET,
            "webhook_url": webhook_url,
        } | settings
        response = self.http.post("/_sandbox/numbers", json=body)
        assert response.status_code == 201, response.text
        return response.json()

    def patch(self, phone_number_id: str, **changes: Any) -> dict[str, Any]:
        response = self.http.patch(f"/_sandbox/numbers/{phone_number_id}", json=changes)
        assert response.status_code == 200, response.text
        return response.json()

    def send(
        self,
        number: dict[str, Any],
        to: str = "16505551234",
        body: dict[str, Any] | None = None,
        key: str | None = None,
        timeout: float = 10,
        **extra: Any,
    ) -> httpx.Response:
        payload = body or {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": to,
            "type": "text",
            "text": {"body": "Your order has shipped."},
        }
        headers = {"Authorization": f"Bearer {number['token']}"}
        if key is not None:
            headers["Idempotency-Key"] = key
        return self.http.post(
            f"/v21.0/{number['phone_number_id']}/messages",
            json=payload | extra,
            headers=headers,
            timeout=timeout,
        )

    def messages(self, number: dict[str, Any]) -> list[dict[str, Any]]:
        response = self.http.get(f"/_sandbox/numbers/{number['phone_number_id']}/messages")
        assert response.status_code == 200, response.text
        return response.json()["messages"]

    def requests(self, number: dict[str, Any]) -> list[dict[str, Any]]:
        params = {"phone_number_id": number["phone_number_id"]}
        return self.http.get("/_sandbox/requests", params=params).json()["requests"]

    def webhooks(self, number: dict[str, Any]) -> list[dict[str, Any]]:
        params = {"phone_number_id": number["phone_number_id"]}
        return self.http.get("/_sandbox/webhooks", params=params).json()["webhooks"]


@pytest.fixture
def sandbox(sandbox_process: SandboxProcess) -> Iterator[SandboxClient]:
    client = SandboxClient(sandbox_process.url)
    assert client.http.post("/_sandbox/reset").status_code == 200
    yield client
    client.http.close()


@dataclass
class ReceivedWebhook:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() on arrival


@dataclass
class WebhookReceiver:
    """A local HTTP server standing in for Ratchet's webhook endpoint."""

    url: str = ""
    received: list[ReceivedWebhook] = field(default_factory=list)
    # Answer these statuses to the first posts, then 200 (to exercise the sandbox's retries).
    failures: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, hook: ReceivedWebhook) -> int:
        with self.lock:
            self.received.append(hook)
            return self.failures.pop(0) if self.failures else 200

    def snapshot(self) -> list[ReceivedWebhook]:
        with self.lock:
            return list(self.received)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[ReceivedWebhook]:
        wait_until(lambda: len(self.snapshot()) >= count, timeout, f"{count} webhooks")
        return self.snapshot()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    state = WebhookReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            hook = ReceivedWebhook(self.path, dict(self.headers.items()), body, time.monotonic())
            status = state.record(hook)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/webhooks/whatsapp"
    yield state
    server.shutdown()
    server.server_close()
    thread.join()
