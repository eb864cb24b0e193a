"""Faults of a PostgreSQL connection for the tests of what survives them: a TCP path that
forgets its flows silently, as a NAT or a load balancer does (`ForgetfulPath`, the `path`
fixture, a URL `through` it), and a backend terminated by the server (`terminate`).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.db import normalise_url


def terminate(pg_url: str, pid: int) -> None:
    engine = create_engine(normalise_url(pg_url))
    try:
        with engine.connect() as other:
            # With a timeout, pg_terminate_backend returns once the process has exited.
            gone = other.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})
            assert gone.scalar_one() is True
    finally:
        engine.dispose()


@dataclass
class Flow:
    client: socket.socket
    upstream: socket.socket
    forgotten: bool = False


class ForgetfulPath:
    """A TCP path to PostgreSQL that can forget its connections, as a NAT or a load balancer
    does after its idle timeout: nothing reaches the client then (no FIN to see), and the
    client's next packet is answered with a reset."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.flows: list[Flow] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            flow = Flow(client, socket.create_connection(self.target))
            self.flows.append(flow)
            threading.Thread(target=self._up, args=(flow,), daemon=True).start()
            threading.Thread(target=self._down, args=(flow,), daemon=True).start()

    @staticmethod
    def _up(flow: Flow) -> None:
        try:
            while data := flow.client.recv(65536):
                if flow.forgotten:
                    # Closed with no linger: a reset, as for a flow the path no longer knows.
                    flow.client.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    break
                flow.upstream.sendall(data)
        except OSError:
            pass
        finally:
            flow.client.close()

    @staticmethod
    def _down(flow: Flow) -> None:
        try:
            while data := flow.upstream.recv(65536):
                if not flow.forgotten:
                    flow.client.sendall(data)
        except OSError:
            pass

    def forget(self) -> None:
        for flow in self.flows:
            flow.forgotten = True

    def close(self) -> None:
        """Cut every flow and take no more: the path is gone."""
        # A thread blocked in `accept` would take one more connection after a bare close.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for flow in self.flows:
            for sock in (flow.client, flow.upstream):
                sock.close()


@pytest.fixture
def path(pg_url: str) -> Iterator[ForgetfulPath]:
    url = make_url(normalise_url(pg_url))
    forgetful = ForgetfulPath(url.host or "127.0.0.1", url.port or 5432)
    yield forgetful
    forgetful.close()


def through(pg_url: str, path: ForgetfulPath) -> str:
    url = make_url(normalise_url(pg_url)).set(host="127.0.0.1", port=path.port)
    return url.render_as_string(hide_password=False)
