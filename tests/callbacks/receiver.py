"""A tenant's receiver on 127.0.0.1: the outside world status callbacks are posted to.

It behaves as a careful receiver does: verifies each POST with the `standardwebhooks`
reference library, applies a callback once per `webhook-id` (a repeat is acknowledged and
dropped), and keeps what it applied in order. `script` makes it misbehave, one action per
POST in turn ("ok" once it runs out): an HTTP status (with headers), `hang` (answers only
after `hang_seconds`, by when the sender has given up; it applied it all the same),
`block` (never answers: the test kills the sender), `slow` (200 after `slow_seconds`,
inside the sender's deadline), `huge` (200 and a body without end), `redirect` (a 302
elsewhere).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

from ..conftest import POLL

Action = str | int | tuple[int, dict[str, str]]


@dataclass
class Seen:
    webhook_id: str
    verified: bool
    body: dict[str, Any] | None
    path: str
    signature: str = ""


@dataclass
class Receiver:
    secret: str = ""
    script: list[Action] = field(default_factory=list)
    hang_seconds: float = 2.0
    slow_seconds: float = 0.2
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    applied: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    got_one: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/ratchet"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                receiver._handle(self)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs=POLL, daemon=True).start()
        return self

    def stop(self) -> None:
        """Down: connections are refused until `start` again (on the same port)."""
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def applied_in_order(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.applied.values())

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        raw = request.rfile.read(int(request.headers.get("Content-Length", "0")))
        headers = {name: value for name, value in request.headers.items()}
        try:
            body = Webhook(self.secret).verify(raw, headers)
            verified = True
        except WebhookVerificationError:
            body, verified = None, False
        with self.lock:
            action: Action = self.script.pop(0) if self.script else "ok"
            webhook_id = headers.get("webhook-id", "")
            signature = headers.get("webhook-signature", "")
            self.seen.append(Seen(webhook_id, verified, body, request.path, signature))
            # A receiver applies what verifies, once per id, unless it is failing.
            applies = verified and (
                action in ("ok", "hang", "block", "huge", "slow")
                or (isinstance(action, int) and 200 <= action < 300)
            )
            if applies and webhook_id not in self.applied:
                self.applied[webhook_id] = body or {}
        self.got_one.set()
        if action == "block":
            self.release.wait(60)
            return
        if action == "hang":
            time.sleep(self.hang_seconds)
        if action == "slow":
            time.sleep(self.slow_seconds)
        if action == "huge":
            request.send_response(200)
            request.send_header("Content-Type", "text/plain")
            request.end_headers()
            try:
                for _ in range(100_000):  # 100 MB, far past what the sender reads
                    request.wfile.write(b"<script>x</script>" * 56 + b"\n")
            except OSError:
                pass  # the sender stopped reading and closed: as it should
            request.close_connection = True
            return
        status, extra = 200, {}
        if action == "redirect":
            status, extra = 302, {"Location": "http://127.0.0.1:9/elsewhere"}
        elif isinstance(action, int):
            status = action
        elif isinstance(action, tuple):
            status, extra = action
        answer = json.dumps({"ok": status < 300, "note": "<b>escaped?</b>"}).encode()
        try:
            request.send_response(status)
            for name, value in extra.items():
                request.send_header(name, value)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(answer)))
            request.end_headers()
            request.wfile.write(answer)
        except OSError:
            pass  # the sender gave up waiting (a `hang`)
