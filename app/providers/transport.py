"""The network layer under `app/providers/http.py`: sockets bounded by a TOTAL deadline, and
the process's connection pools.

httpx's timeouts are per phase and per socket operation: a server that trickles one byte
every second never trips a 10 s read timeout. So every socket operation here (connect, TLS,
each write and each read) is bounded by the time left until the deadline of the request
running on this thread (`bounded_by`).

The pools are shared by every call of the process, but not as one pool: a drain keeps up to
`RATCHET_DRAIN_CONCURRENCY` calls in flight, and httpcore's pool looks through all its
connections and waiting requests, under one lock, at every request and every answer. One
pool at 128 calls in flight spent 7.5 ms of the worker's CPU per send and stretched 200 ms
answers to 300 to 550 ms; split into `POOLS` pools, each thread keeping to one, 2.4 ms and
210 ms (`bench/send_rate.py --latency`, 2026-12-05). httpcore also polls the socket of
every idle connection in a pool at each request and answer, so a pool's cost grows with its
connections: at 256 calls in flight, 32 pools took 1.7 to 2.2 ms of the worker's CPU per
send where 8 took 2.2 to 2.6 (the same bench, later that day); at 512, a pool per call
thread took 1.2 where 32 took 1.4 to 1.6 against 200 ms answers. A drain's call thread n
sends through pool n (`bind`), so the next drain's thread n finds the connection its
predecessor kept alive; other threads are dealt pools in turn. A thread keeps its pool for
life and shares its connections with any other thread given the same pool.

A kept-alive connection is found by scheme, host name and port, not by the address a
callback's name was pinned to (`app/providers/pinning.py`): a name that now resolves to
another checked address may still be posted to over a connection opened to the earlier
checked address, as with one pool. Both addresses passed the check.
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from app.providers.pinning import address_for

# Pools a process's calls are spread over, by thread (each pool a ceiling of `_LIMITS`),
# each made at its first use: one for each of a drain's 512 call threads
# (`RATCHET_DRAIN_CONCURRENCY`).
POOLS = 512
# Every connection kept alive: a drain keeps dozens of calls in flight to one host, and a
# pool that kept 20 opened a new connection for each call past them (bench/send_rate.py
# --latency: 95 sends/s against 200 ms answers, 141 with all kept).
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)
# A socket timeout of 0 would switch the socket to non-blocking mode (an error of another
# kind); the smallest wait we ask for once the deadline has nearly passed.
_MIN_WAIT = 0.001

# The deadline (time.monotonic()) of the request running on this thread, read by the
# network streams below at every socket operation.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "ratchet_http_deadline", default=None
)


@contextmanager
def bounded_by(deadline: float) -> Iterator[None]:
    """Every socket operation inside ends by `deadline` (a `time.monotonic()` instant)."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def _bounded(timeout: float | None, timeout_error: type[Exception]) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise timeout_error("total deadline passed")
    remaining = max(remaining, _MIN_WAIT)
    return remaining if timeout is None else min(timeout, remaining)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own sync backend, with every operation cut short at the deadline.
    (Name resolution inside connect is not interruptible: the OS resolver has no timeout.)"""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        host = address_for(host)  # a checked address, when the caller pinned one
        stream = self._inner.connect_tcp(host, port, bounded, local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport on our network backend. httpx does not take a backend argument, so
    the pool it builds is replaced by an identical one (httpx is pinned in pyproject.toml;
    tests/providers/test_http.py fails if this stops bounding the total time). Both are given
    the one `ssl_context`: loading the certificates costs 15 to 40 ms of CPU each time."""

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, limits=limits, trust_env=False, retries=0)
        self._pool = self.core = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            retries=0,
            network_backend=_DeadlineBackend(),
        )


class PooledTransport(httpx.BaseTransport):
    """`pools` deadline transports, each made at its first use; each thread sends through
    one: the one it is bound to (`bind`), or else one dealt in turn at its first request."""

    def __init__(self, pools: int = POOLS) -> None:
        # One certificate load for all: built per pool, they held a worker's first calls
        # back 300 ms, then let them out together (tests/jobs/test_drains.py's pace).
        self.ssl_context = httpx.create_ssl_context(trust_env=False)
        self._pools: list[_DeadlineTransport | None] = [None] * max(1, pools)
        self._turn = itertools.count()
        self._mine = threading.local()
        self._making = threading.Lock()

    @property
    def pools(self) -> list[_DeadlineTransport]:
        """The pools made so far."""
        return [pool for pool in self._pools if pool is not None]

    def _pool_at(self, n: int) -> _DeadlineTransport:
        n %= len(self._pools)
        pool = self._pools[n]
        if pool is None:
            with self._making:
                pool = self._pools[n]
                if pool is None:
                    pool = self._pools[n] = _DeadlineTransport(_LIMITS, self.ssl_context)
        return pool

    def bind(self, n: int) -> None:
        """This thread sends through pool `n` (modulo their number) from now on."""
        self._mine.pool = self._pool_at(n)

    def pool(self) -> _DeadlineTransport:
        """This thread's pool."""
        pool: _DeadlineTransport | None = getattr(self._mine, "pool", None)
        if pool is None:
            pool = self._mine.pool = self._pool_at(next(self._turn))
        return pool

    def core_pool(self) -> httpcore.ConnectionPool:
        """This thread's pool, as httpcore's own: what `app/providers/http.py` posts through,
        without httpx's request and response objects around each call."""
        return self.pool().core

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.pool().handle_request(request)

    def close(self) -> None:
        for pool in self.pools:
            pool.close()


_transport: PooledTransport | None = None
_transport_lock = threading.Lock()


def get_transport() -> PooledTransport:
    """The shared transport, created on first use (never at import)."""
    global _transport
    transport = _transport
    if transport is not None:
        return transport
    with _transport_lock:
        if _transport is None:
            _transport = PooledTransport()
        return _transport


def close_transport() -> None:
    """Close the shared transport and its connections; the next call makes a new one."""
    global _transport
    with _transport_lock:
        transport, _transport = _transport, None
    if transport is not None:
        transport.close()


# A process that exits closes its kept-alive connections itself, rather than leaving their
# sockets to the garbage collector's last pass (a ResourceWarning each).
atexit.register(close_transport)
