"""TLS through the shared transport's pools (`app/providers/transport.py`): the one SSL
context checks certificates and names as httpx's own did, a silent handshake ends by the
total deadline, and the deadline of a request is restored after it, however it ended."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpcore
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.providers import transport
from app.providers.http import (
    ConnectFailedError,
    DeadlineExceededError,
    get_transport,
    post_json,
)
from app.providers.pinning import pinned


class _Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for `localhost` and 127.0.0.1 that no CA signed, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    cert_path, key_path = _self_signed(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], cert_path
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_shared_context_checks_certificates_and_names() -> None:
    shared = get_transport()
    shared.pool()  # at least one pool made
    for context in [shared.ssl_context, *(pool._pool._ssl_context for pool in shared.pools)]:
        assert context is not None
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.check_hostname


def test_a_certificate_no_trusted_ca_signed_is_refused(tls_server: tuple[int, Path]) -> None:
    port, _ = tls_server
    with pytest.raises(ConnectFailedError):
        post_json(f"https://localhost:{port}/x", {}, {}, time.monotonic() + 5)


def test_a_trusted_certificate_is_taken_on_every_pool_and_a_pinned_name_still_checked(
    tls_server: tuple[int, Path],
) -> None:
    """Trusting the certificate in the one context trusts it on every pool (threads are
    dealt different pools); a name the certificate does not carry, pinned to the same
    address, is still refused: the name, not the address, is checked."""
    port, cert_path = tls_server
    shared = get_transport()
    shared.ssl_context.load_verify_locations(cert_path)
    statuses: list[int] = []
    pools: set[int] = set()

    def call(n: int) -> None:
        shared.bind(n)
        pools.add(id(shared.pool()))
        statuses.append(
            post_json(f"https://localhost:{port}/x", {}, {}, time.monotonic() + 5).status
        )

    threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * 8
    assert len(pools) == 8  # the one context, trusted on eight pools' connections

    with pinned("wrong.ratchet.invalid", "127.0.0.1"), pytest.raises(ConnectFailedError):
        post_json(f"https://wrong.ratchet.invalid:{port}/x", {}, {}, time.monotonic() + 5)


def test_a_slow_connect_then_a_silent_handshake_ends_by_the_total_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connect that takes most of the budget, then a server that accepts and never
    answers the TLS hello: the handshake gets only what is left. Bounded by httpx's own
    per-phase timeout instead, it would wait a whole budget more (2 s in all here)."""
    real_connect = httpcore.SyncBackend.connect_tcp

    def slow_network(self: httpcore.SyncBackend, *args: object, **kwargs: object) -> object:
        time.sleep(1.0)  # the outside world: a slow route to the provider
        return real_connect(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", slow_network)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(5)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises((DeadlineExceededError, ConnectFailedError)):
            post_json(f"https://127.0.0.1:{port}/x", {}, {}, started + 1.2)
        # Generous for a busy machine: the deadline is 1.2 s, the unbounded wait 2.2 s.
        assert time.monotonic() - started < 1.8


def test_a_request_s_deadline_is_restored_however_it_ended() -> None:
    assert transport._deadline.get() is None
    with transport.bounded_by(123.0):
        with pytest.raises(RuntimeError), transport.bounded_by(456.0):
            assert transport._deadline.get() == 456.0
            raise RuntimeError
        assert transport._deadline.get() == 123.0
    assert transport._deadline.get() is None
