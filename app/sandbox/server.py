"""HTTP plumbing: routing, raw answers (including hangs and connection resets), lifecycle.

Stdlib http.server rather than a framework because faults need the raw socket: a reset is
SO_LINGER 0 then close (an RST, no HTTP answer), a hang is a handler that simply waits.
"""

import json
import logging
import re
import signal
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from app.sandbox.control import ControlApi
from app.sandbox.errors import error_body
from app.sandbox.pages import PagesState, handle_page_send
from app.sandbox.poster import WebhookPoster
from app.sandbox.state import SandboxState
from app.sandbox.twilio import API_PREFIX as TWILIO_API
from app.sandbox.twilio import CONTROL_PREFIX as TWILIO_CONTROL
from app.sandbox.twilio import Reply as TwilioReply
from app.sandbox.twilio import TwilioSandbox
from app.sandbox.twilio_control import TwilioControl
from app.sandbox.whatsapp import Reply, handle_send

logger = logging.getLogger("app.sandbox")

SEND_PATH = re.compile(r"/(?P<version>v\d+(?:\.\d+)?)/(?P<id>[^/]+)/messages")


class SandboxServer:
    """The sandbox in this process: ``SandboxServer().start()``, then ``.url`` and ``.stop()``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = SandboxState()
        self.poster = WebhookPoster(on_result=self.state.log_webhook)
        self.pages = PagesState()
        self.control = ControlApi(self.state, self.poster, self.pages)
        self.twilio = TwilioSandbox(self.poster)
        self.twilio_control = TwilioControl(self.twilio)
        # Set on stop: hanging handlers wake up and drop their connection instead of
        # keeping the process (or a test) alive for hang_seconds.
        self.stopping = threading.Event()
        self._httpd = _HTTPServer((host, port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="sandbox-http",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> "SandboxServer":
        self.poster.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
        self.poster.stop()

    def __enter__(self) -> "SandboxServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # Load tests reconnect in bursts after resets and timeouts; the default backlog of 5
    # drops their SYNs and turns into spurious connect timeouts.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], sandbox: SandboxServer) -> None:
        self.sandbox = sandbox
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that give up (timeouts are the point of some faults) are not errors.
        if isinstance(sys.exc_info()[1], ConnectionError):
            logger.debug("client %s went away", client_address)
        else:
            logger.exception("error while handling a request from %s", client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, each answer waits ~40 ms for
    # the client's delayed ACK, which caps a keep-alive client at ~25 sends a second.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s - %s", self.address_string(), format % args)

    def _dispatch(self) -> None:
        sandbox = self.server.sandbox
        url = urlsplit(self.path)
        raw = self._read_body()
        if url.path.startswith(TWILIO_CONTROL + "/"):
            query = dict(parse_qsl(url.query))
            self._answer(*sandbox.twilio_control.handle(self.command, url.path, query, raw))
            return
        if url.path.startswith(TWILIO_API) and self.command == "POST":
            twilio_reply = sandbox.twilio.handle_create(url.path, dict(self.headers.items()), raw)
            if twilio_reply is not None:
                self._deliver(twilio_reply)
                return
        if url.path.rstrip("/") == "/_sandbox/reset":
            sandbox.twilio.reset()
        if url.path.startswith("/_sandbox/"):
            query = dict(parse_qsl(url.query))
            status, body = sandbox.control.handle(self.command, url.path, query, raw)
            self._answer(status, body)
            return
        match = SEND_PATH.fullmatch(url.path)
        if match is None or self.command != "POST":
            details = f"Unknown path components: {url.path}"
            self._answer(400, error_body(100, details))
            return
        if sandbox.pages.knows(match["id"]):  # a Page or Instagram account: the Send API
            reply = handle_page_send(
                sandbox.pages, sandbox.state, match["id"], dict(self.headers.items()), raw
            )
        else:
            reply = handle_send(sandbox.state, match["id"], dict(self.headers.items()), raw)
        if reply.webhooks is not None:
            sandbox.poster.schedule(reply.webhooks, reply.webhook_delay)
        self._deliver(reply)

    def _deliver(self, reply: Reply | TwilioReply) -> None:
        delay = getattr(reply, "delay", 0.0)
        if delay > 0 and self.server.sandbox.stopping.wait(delay):
            self.close_connection = True
            return
        if reply.answer == "reset":
            self._reset_connection()
            return
        if reply.answer == "hang" and self.server.sandbox.stopping.wait(reply.hang_seconds):
            self.close_connection = True
            return
        self._answer(reply.status, reply.body, reply.headers)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                chunk = self.rfile.read(size + 2)[:size]
                if size == 0:
                    return b"".join(chunks)
                chunks.append(chunk)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up first (it timed out on a hang): nothing left to tell it.
            self.close_connection = True

    def _reset_connection(self) -> None:
        # Linger on, timeout 0: close() sends an RST instead of a FIN, with no answer.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()
        self.close_connection = True


def serve(host: str = "127.0.0.1", port: int = 0) -> None:
    """Run the sandbox until SIGTERM or SIGINT, then shut down cleanly."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # One line per webhook it posts would drown `make run`'s output: warnings only.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    server = SandboxServer(host, port).start()
    try:
        print(f"sandbox listening on {server.url}", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
