"""The shared transport's pools: a drain's call threads spread over many small connection
pools, each thread keeping to one (`app/providers/transport.py`)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import httpx

from app.providers.http import post_json
from app.providers.transport import PooledTransport

from .conftest import Answer, ScriptedServer

POOLS = 8  # a transport of eight pools here; the process's has `transport.POOLS`
THREADS = 2 * POOLS
T = TypeVar("T")


def _in_threads(count: int, work: Callable[[], T]) -> list[T]:
    """Run `work` on `count` threads started together; their results, in thread order."""
    results: list[T | None] = [None] * count
    barrier = threading.Barrier(count)

    def run(n: int) -> None:
        barrier.wait()
        results[n] = work()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [result for result in results if result is not None]


def _connections(pool: httpx.HTTPTransport) -> int:
    return len(pool._pool.connections)


def _post(transport: PooledTransport, url: str) -> int:
    request = httpx.Request("POST", url, json={})
    response = transport.handle_request(request)
    response.read()
    response.close()
    return response.status_code


def test_call_threads_are_dealt_the_pools_in_turn_and_each_keeps_its_own(
    provider_server: ScriptedServer,
) -> None:
    """Sixteen threads calling at once: two threads to each of the eight pools, so no pool
    holds more than two of their connections (one pool used to hold all sixteen, and look
    through them all at every request and answer)."""
    provider_server.answer(*[Answer(200, b"{}", delay=0.2) for _ in range(THREADS)])
    transport = PooledTransport(POOLS)
    url = f"{provider_server.base_url}/123/messages"

    def call() -> tuple[int, int, int]:
        mine = transport.pool()
        status = _post(transport, url)
        return id(mine), id(transport.pool()), status

    try:
        seen = _in_threads(THREADS, call)

        assert [status for _, _, status in seen] == [200] * THREADS
        assert all(before == after for before, after, _ in seen)  # a thread keeps its pool
        dealt = Counter(pool for pool, _, _ in seen)
        assert sorted(dealt.values()) == [2] * POOLS, dealt
        assert {id(pool) for pool in transport.pools} == set(dealt)
        assert all(_connections(pool) <= 2 for pool in transport.pools)
        assert sum(_connections(pool) for pool in transport.pools) == len(
            {request.client_port for request in provider_server.requests}
        )
    finally:
        transport.close()


def test_a_thread_bound_to_a_pool_sends_through_it_and_pools_are_made_as_first_used(
    provider_server: ScriptedServer,
) -> None:
    """A drain's call thread n is bound to pool n (modulo the pools), and the pool keeps
    the connection for the next thread bound to n: the same client port both times."""
    provider_server.answer(*[Answer(200, b"{}") for _ in range(3)])
    transport = PooledTransport(POOLS)
    url = f"{provider_server.base_url}/123/messages"

    def bound(n: int) -> Callable[[], int]:
        def call() -> int:
            transport.bind(n)
            return id(transport.pool()) if _post(transport, url) == 200 else 0

        return call

    try:
        assert transport.pools == []  # none made before a thread asks
        first = _in_threads(1, bound(3))
        again = _in_threads(1, bound(3))
        wrapped = _in_threads(1, bound(3 + POOLS))
        assert first == again == wrapped and len(transport.pools) == 1
        ports = [request.client_port for request in provider_server.requests]
        assert len(ports) == 3 and len(set(ports)) == 1, ports
    finally:
        transport.close()


def test_a_thread_reuses_its_pool_s_connection(provider_server: ScriptedServer) -> None:
    provider_server.answer(Answer(200, b"{}"), Answer(200, b"{}"))
    url = f"{provider_server.base_url}/123/messages"

    def twice() -> list[int]:
        post_json(url, {}, {}, time.monotonic() + 5)
        post_json(url, {}, {}, time.monotonic() + 5)
        return [request.client_port for request in provider_server.requests]

    [ports] = _in_threads(1, twice)
    assert len(ports) == 2 and ports[0] == ports[1]


def test_closing_closes_every_pool_s_connections(provider_server: ScriptedServer) -> None:
    provider_server.answer(*[Answer(200, b"{}", delay=0.1) for _ in range(THREADS)])
    transport = PooledTransport(POOLS)
    url = f"{provider_server.base_url}/123/messages"

    assert _in_threads(THREADS, lambda: _post(transport, url)) == [200] * THREADS
    assert sum(_connections(pool) for pool in transport.pools) >= POOLS

    transport.close()

    assert [_connections(pool) for pool in transport.pools] == [0] * POOLS


def test_the_pools_share_one_ssl_context() -> None:
    """Each pool once loaded the certificates twice (15 to 40 ms each): a worker's first
    calls waited for sixteen loads, then reached the provider together, above the pace."""
    transport = PooledTransport(POOLS)
    try:
        for n in range(POOLS):
            transport.bind(n)
        assert len(transport.pools) == POOLS
        contexts = {id(pool._pool._ssl_context) for pool in transport.pools}
        assert contexts == {id(transport.ssl_context)}
    finally:
        transport.close()
