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

With `RATCHET_PACING_AHEAD` set, a campaign's pacing slots may be granted a little ahead
(`Pacer.take`), so a drain below a worker's speed claims a dozen messages a step rather
than a few. Each call waits on its thread for its slot's start, and one whose start has
not come has not begun.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class NotBegun:
    """A call whose start had not come when its drain abandoned it: no request left."""

    prepared: Prepared


class InFlight:
    """The calls of one drain, each on a call thread from its submission. A call granted
    a pacing slot ahead (`Pacer.take`) waits on its thread for its slot's start, so it
    starts on time whatever the drain's own thread is doing; until then it can be given
    back unsent (`abandon`)."""

    def __init__(self, threads: int, name: str) -> None:
        self.threads = max(1, threads)
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        # Begun, waiting for their start, or queued; not yet collected, oldest first.
        self._calls: dict[Future[Called | NotBegun], Prepared] = {}
        self._abandoned = threading.Event()  # set: the calls still waiting do not begin

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def free(self) -> int:
        """Call threads not busy with a call of ours (or waiting to begin one)."""
        return self.threads - len(self._calls)

    def submit(
        self,
        batch: Sequence[Prepared],
        send: Callable[[Prepared], Called],
        starts: Sequence[float] = (),
    ) -> None:
        """Call each of `batch` on a thread, the i-th at `starts[i]` (`time.monotonic()`),
        or at once: a start already passed, or none given."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.threads,
                thread_name_prefix=self._name,
                initializer=_bind_pool,
                initargs=(itertools.count(),),
            )
        for n, prepared in enumerate(batch):
            start = starts[n] if n < len(starts) else 0.0
            self._calls[self._pool.submit(self._at_start, send, prepared, start)] = prepared

    def _at_start(
        self, send: Callable[[Prepared], Called], prepared: Prepared, start: float
    ) -> Called | NotBegun:
        """On a call thread: the call, once its start has come (unless abandoned first)."""
        wait_for = start - time.monotonic()
        if wait_for > 0 and self._abandoned.wait(wait_for):
            return NotBegun(prepared)
        return send(prepared)

    def wait(self, timeout: float | None, *, every: bool = False) -> list[Called]:
        """Wait up to `timeout` (None: until one ends; `every`: until all have) and collect
        the calls that ended, oldest first. A call that raised raises here, and every call
        stays held, so the drain's `abandon` still records those that ended with it."""
        until = ALL_COMPLETED if every else FIRST_COMPLETED
        done, _ = wait(self._calls, timeout=timeout, return_when=until)
        ended = [call for call in self._calls if call in done]
        for call in ended:
            if (error := call.exception()) is not None:
                raise error
        for call in ended:
            del self._calls[call]
        results = [call.result() for call in ended]  # a NotBegun only after `abandon`
        return [result for result in results if not isinstance(result, NotBegun)]

    def abandon(self) -> tuple[list[Called], list[Prepared]]:
        """Cancel the calls not yet begun (queued, or waiting for their start) and wait for
        those begun. Returns those that ended, and the attempts that never began (no
        request left for them)."""
        calls, self._calls = self._calls, {}
        self._abandoned.set()
        unsent = [prepared for call, prepared in calls.items() if call.cancel()]
        wait(calls)
        self._abandoned = threading.Event()  # every call has returned: none reads the old
        ended: list[Called] = []
        for call in calls:
            if call.cancelled() or call.exception() is not None:
                continue
            result = call.result()
            if isinstance(result, NotBegun):
                unsent.append(result.prepared)
            else:
                ended.append(result)
        return ended, unsent

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
