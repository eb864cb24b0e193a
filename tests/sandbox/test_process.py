"""The sandbox as a process and in-process: it announces itself and stops cleanly."""

import signal
from pathlib import Path

import httpx
import pytest

from app.sandbox.server import SandboxServer

from .conftest import start_sandbox_process, stop_sandbox_process


def test_it_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    sandbox = start_sandbox_process(tmp_path / "stderr.log")
    assert sandbox.url.startswith("http://127.0.0.1:")
    assert httpx.get(f"{sandbox.url}/_sandbox/health").status_code == 200

    code, output = stop_sandbox_process(sandbox, signal.SIGINT)

    assert code == 0, output
    assert "Traceback" not in output


def test_it_stops_promptly_while_a_send_hangs(tmp_path: Path) -> None:
    sandbox = start_sandbox_process(tmp_path / "stderr.log")
    number = {
        "phone_number_id": "1",
        "token": "t",
        "app_secret": "s",
        "webhook_url": "http://127.0.0.1:9/unreachable",
        "statuses": [],
    }
    send = {
        "messaging_product": "whatsapp",
        "to": "15550000013",
        "type": "text",
        "text": {"body": "x"},
    }
    with httpx.Client(base_url=sandbox.url) as client:
        client.post("/_sandbox/numbers", json=number)
        with pytest.raises(httpx.TimeoutException):
            client.post(
                "/v21.0/1/messages", headers={"Authorization": "Bearer t"}, json=send, timeout=0.3
            )
    # The handler is still inside its 30 s hang: stopping must not wait for it (the stop
    # gives the process 15 s, so waiting out the hang would raise TimeoutExpired).
    code, output = stop_sandbox_process(sandbox)

    assert code == 0, output
    assert "Traceback" not in output


def test_it_runs_in_process_for_tests() -> None:
    with SandboxServer() as server, httpx.Client(base_url=server.url) as client:
        assert client.get("/_sandbox/health").json() == {"status": "ok"}
