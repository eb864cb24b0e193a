"""A drain's provider calls in flight: the one place the send path runs things concurrently.

Each call runs on a thread of a pool the drain keeps for its whole run (starting a pool's
threads for every batch cost more CPU than one send's log line), and is collected by the
drain's own thread. The fencing rules are the call's and the record's (`jobs/call.py`,
`jobs/record.py`): a call checks its lease before it starts and records its outcome with
writes fenced on its attempt and cycle, so it may end after the drain moved on.

A call's thread only calls (`call` in `jobs/call.py`: the lease check, then the provider,
no database); the drain's own thread records the ends it collects, many in one
transaction (`record_batch`), so a worker holds one PostgreSQL connection per drain
however many calls it has in flight. A call is abandoned only before it begins
(`abandon`): a cancelled future never ran, so no request left for it, and the drain
gives its message back (`give_back`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from app.providers.transport import get_transport
from jobs.call import Called, Prepared

log = logging.getLogger(__name__)


def _bind_pool(numbers: Iterator[int]) -> None:
    """A call thread's start: thread n of a drain sends through connection pool n, which
    kept alive the connection of the last drain's thread n (`app/providers/transport.py`).
    Never raises: an initializer that raised would break the whole executor, failing every
    call queued on it; an unbound thread is dealt a pool at its first call instead."""
    try:
        get_transport().bind(next(numbers))
    except Exception as exc:
        log.warning("a call thread was left to be dealt a pool: %s", exc)


class InFlight:
    def __init__(self, threads: int, name: str) -> None:
        self.threads = max(1, threads)
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        # Begun or queued, not yet collected, oldest first, each with its attempt.
        self._calls: dict[Future[Called], Prepared] = {}

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def free(self) -> int:
        """Call threads not busy with a call of ours."""
        return self.threads - len(self._calls)

    def submit(self, batch: Iterable[Prepared], send: Callable[[Prepared], Called]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.threads,
                thread_name_prefix=self._name,
                initializer=_bind_pool,
                initargs=(itertools.count(),),
            )
        for prepared in batch:
            self._calls[self._pool.submit(send, prepared)] = prepared

    def wait(self, timeout: float | None) -> list[Called]:
        """Wait up to `timeout` (None: until one ends) and collect the calls that ended,
        oldest first. A call that raised raises here, and every call stays held, so the
        drain's `abandon` still records those that ended with it."""
        done, _ = wait(self._calls, timeout=timeout, return_when=FIRST_COMPLETED)
        ended = [call for call in self._calls if call in done]
        for call in ended:
            if (error := call.exception()) is not None:
                raise error
        for call in ended:
            del self._calls[call]
        return [call.result() for call in ended]

    def abandon(self) -> tuple[list[Called], list[Prepared]]:
        """Cancel the calls not yet begun and wait for those begun. Returns those that
        ended, and the attempts that never began (no request left for them)."""
        calls, self._calls = self._calls, {}
        unsent = [prepared for call, prepared in calls.items() if call.cancel()]
        wait(calls)
        ended = [c for c in calls if not c.cancelled() and c.exception() is None]
        return [call.result() for call in ended], unsent

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
