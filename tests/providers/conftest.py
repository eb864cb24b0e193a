"""A scripted provider: a real local HTTP server that answers each request as the test says.

Each test queues `Answer`s; the server records every request it gets (method, path,
headers, body) and plays the next answer: a status and body, or misbehaviour (answer late,
trickle bytes, reset the connection). Everything is closed at the end of the test: the
shared HTTP client first (its idle connections keep server threads reading), then the server.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.providers.base import Credentials
from app.providers.http import close_transport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "whatsapp"
TOKEN = "EAAG-test-token-do-not-log"
APP_SECRET = "test-app-secret"
PHONE_NUMBER_ID = "106540352242922"


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@dataclass
class Answer:
    status: int = 200
    body: Any = b""  # bytes as is, str encoded, anything else as JSON
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # wait this long before answering
    trickle: float | None = None  # seconds between single bytes of the answer
    trickle_headers: bool = False  # trickle from the status line on, not only the body
    reset: bool = False  # read the request, then reset the connection (RST)

    def encoded_body(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # names lowercased
    body: bytes
    client_port: int  # the same port twice: the client reused its connection
    header_names: list[str] = field(default_factory=list)  # as sent, repeats kept, lowercased

    def json(self) -> Any:
        return json.loads(self.body)


class ScriptedServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.stopping = threading.Event()
        self._answers: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.scripted = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v21.0"

    def credentials(self) -> Credentials:
        return Credentials(
            account_id=PHONE_NUMBER_ID,
            base_url=self.base_url,
            token=TOKEN,
            app_secret=APP_SECRET,
            sender="15550783881",
        )

    def answer(self, *answers: Answer) -> None:
        with self._lock:
            self._answers.extend(answers)

    def record(self, request: Recorded) -> Answer:
        with self._lock:
            self.requests.append(request)
            return self._answers.popleft() if self._answers else Answer(599, b"no answer scripted")

    def close(self) -> None:
        self.stopping.set()  # wakes handlers that are sleeping or trickling
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the handler threads
        self._thread.join()


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() waits for every handler
    # Many call threads connect at once (test_transport_pools.py); the default backlog of 5
    # drops their SYNs, and a retried SYN waits a second or more.
    request_queue_size = 64
    scripted: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The client hanging up on a slow answer is what these tests provoke.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real API
    timeout = 5  # an idle kept-alive connection never holds the server past a test
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        scripted = self.server.scripted
        names = [name.lower() for name in self.headers]
        request = Recorded(self.command, self.path, headers, body, self.client_address[1], names)
        answer = scripted.record(request)
        self._play(answer, scripted.stopping)

    def _play(self, answer: Answer, stopping: threading.Event) -> None:
        if answer.reset:
            # Linger 0: close() sends RST instead of FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if answer.delay and stopping.wait(answer.delay):
            self.close_connection = True
            return
        body = answer.encoded_body()
        head = [f"HTTP/1.1 {answer.status} Scripted"]
        head += [f"{name}: {value}" for name, value in answer.headers.items()]
        if not any(name.lower() == "content-type" for name in answer.headers):
            head.append("Content-Type: application/json")
        head.append(f"Content-Length: {len(body)}")
        raw_head = ("\r\n".join(head) + "\r\n\r\n").encode()
        if answer.trickle is None:
            self.wfile.write(raw_head + body)
            return
        self.close_connection = True
        if not answer.trickle_headers:
            self.wfile.write(raw_head)
            raw_head = b""
        for i in range(len(raw_head + body)):
            self.wfile.write((raw_head + body)[i : i + 1])
            if stopping.wait(answer.trickle):
                return


@pytest.fixture(autouse=True)
def _fresh_http_transport() -> Iterator[None]:
    """Each test starts and ends without the shared transport (no socket outlives a test)."""
    close_transport()
    yield
    close_transport()


@pytest.fixture
def provider_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    yield server
    close_transport()
    server.close()
