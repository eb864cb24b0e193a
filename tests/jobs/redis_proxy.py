"""A TCP forwarder that a test can cut, so that Redis (or whatever it forwards to) is down
for whoever goes through it (`Proxy`). It also forwards from another address than the
loopback one: tests/chaos/hosts.py listens with it where network namespaces reach it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter


class Proxy:
    """A TCP forwarder to Redis that can be cut: 'Redis is down' for whoever uses it.

    `listen_host` is the address it listens on, `target_host` the one it forwards to;
    `sent` counts the bytes each client address sent through it."""

    def __init__(
        self, port: int, listen_host: str = "127.0.0.1", target_host: str = "127.0.0.1"
    ) -> None:
        self.target = (target_host, port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((listen_host, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.sent: Counter[str] = Counter()
        self.down = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, (peer, _) = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:  # the target is down (PostgreSQL restarting): refused, as it
                client.close()
                continue
            self.sockets += [client, upstream]
            if self.down:  # cut while this one was being accepted
                client.close()
                upstream.close()
                continue
            for a, b, sender in ((client, upstream, peer), (upstream, client, None)):
                threading.Thread(target=self._pipe, args=(a, b, sender), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, sender: str | None) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
                if sender is not None:
                    self.sent[sender] += len(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def cut(self) -> None:
        self.down = True
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
