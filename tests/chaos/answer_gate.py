"""A TCP forwarder between the workers and the sandbox that can SIGKILL the worker a
provider's answer is for, right as the answer reaches it (`AnswerGate`): the send is
accepted and answered, and the worker dies before it can record the answer.

Armed, the gate waits for the next success answer (`HTTP/1.1 200`) coming down from the
sandbox, finds the worker process that holds the connection's other end (the socket's
inode, in the TCP table of the worker's own network namespace, /proc/PID/net/tcp), hands
the answer on and kills that process at once. On several hosts the gate listens at the
address the hosts reach this machine at (tests/chaos/hosts.py), so each worker connects to
it straight over its link, and the connection's far end is the worker's own address and
port, not a forwarder's. Whether the worker
had read the answer or not, it had no time to write it down: the run then checks that
the message is sent once, all the same.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path


class AnswerGate:
    def __init__(
        self,
        host: str,
        port: int,
        candidates: Callable[[], list[int]],
        listen_host: str = "127.0.0.1",
    ) -> None:
        self.target = (host, port)
        self.candidates = candidates  # the pids it may kill: workers, never a stopped one
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((listen_host, 0))
        self.listen_host = listen_host
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.armed = False
        self.killed: int | None = None  # the pid it killed since it was last armed
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.listen_host}:{self.port}"

    def arm(self) -> None:
        with self.lock:
            self.armed, self.killed = True, None

    def disarm(self) -> int | None:
        with self.lock:
            self.armed = False
            return self.killed

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _down(self, upstream: socket.socket, client: socket.socket) -> None:
        """Answers on their way to a worker: the armed gate kills the first success's."""
        try:
            while data := upstream.recv(65536):
                victim = None
                if self.armed and data.startswith(b"HTTP/1.1 200"):
                    victim = self._holder(client, self.candidates())
                with self.lock:
                    if victim is not None and self.armed:
                        client.sendall(data)
                        os.kill(victim, signal.SIGKILL)
                        self.armed, self.killed = False, victim
                        continue
                client.sendall(data)
        except OSError:
            pass
        finally:
            for s in (upstream, client):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _holder(client: socket.socket, pids: list[int]) -> int | None:
        """Which of `pids` holds the other end of this accepted connection: its socket is
        in the TCP table of that process's network namespace, local and remote ports
        swapped with ours."""
        try:
            theirs, ours = client.getpeername()[1], client.getsockname()[1]
        except OSError:
            return None
        for pid in pids:
            try:
                table = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in table:
                fields = line.split()
                local, remote = fields[1], fields[2]
                if int(local.split(":")[1], 16) != theirs:
                    continue
                if int(remote.split(":")[1], 16) != ours:
                    continue
                wanted = f"socket:[{fields[9]}]"
                with contextlib.suppress(OSError):
                    for fd in os.listdir(f"/proc/{pid}/fd"):
                        with contextlib.suppress(OSError):
                            if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                                return pid
        return None

    def close(self) -> None:
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()
