"""A local HTTP receiver for the alert webhook: the outside world the evaluator posts to.

It checks each post's signature with the shared secret, keeps every post it was sent, and
answers 500 to the first `fail_first` of them (a receiver having a bad moment)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..conftest import POLL

SECRET = "alert-webhook-shared-secret"


@dataclass
class Post:
    alert_id: str
    signature_ok: bool
    accepted: bool
    body: dict[str, Any]


@dataclass
class Receiver:
    fail_first: int = 0
    posts: list[Post] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/alerts"

    def accepted(self) -> list[Post]:
        with self.lock:
            return [post for post in self.posts if post.accepted]

    def accepted_ids(self) -> list[str]:
        return [post.alert_id for post in self.accepted()]

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                signature = self.headers.get("X-Ratchet-Signature", "")
                parts = dict(p.split("=", 1) for p in signature.split(",") if "=" in p)
                expected = hmac.new(
                    SECRET.encode(), f"{parts.get('t', '')}.".encode() + raw, hashlib.sha256
                ).hexdigest()
                ok = hmac.compare_digest(expected, parts.get("v1", ""))
                with receiver.lock:
                    accept = ok and len(receiver.posts) >= receiver.fail_first
                    receiver.posts.append(
                        Post(
                            self.headers.get("X-Ratchet-Alert-Id", ""), ok, accept, json.loads(raw)
                        )
                    )
                # A refusal echoes the path, as many servers' error pages do.
                answer = b"" if accept else f"no such hook: {self.path}".encode()
                self.send_response(200 if accept else 500)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs=POLL, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=10)
