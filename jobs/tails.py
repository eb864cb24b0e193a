"""A drain's last calls, answered while its worker starts the next job.

A drain that finds nothing more due still has its last calls in flight: against a
provider that answers in 200 ms, waiting for them before handing the worker back left
the worker idle for most of those 200 ms at every drain's end, and one worker runs a
number's shards one after another (docs/scaling.md). Instead, when another job waits on
the lane's queue, the drain hands its calls in flight to a tail thread here and lets its
shard go; the thread collects and records them (the drain's own `_collect`, fenced as
ever), closes their call threads, and rings the shard, since what they recorded may have
made a message due (the next of a conversation, a retry).

Nothing about a message changes hands: its lease, its fenced record and the pre-call
check are the call's own, whichever thread records it. A claim needs the shard's key,
which the next drain may hold while the tail is answered; it cannot claim the tail's
messages (leased) nor their conversations' next ones (held until an outcome).

Bounds: one tail per process at a time, so a worker has at most twice its call threads
in flight and two PostgreSQL connections; a drain that ends with no job waiting waits
for its own calls and for the tail (a worker whose waiting job another worker took may
sit idle while its tail is answered). The thread is not a daemon: a worker told to stop
(SIGTERM) exits once the tail is recorded, and a worker killed outright leaves the
tail's leases to lapse, as a killed drain does. A tail whose record fails (the database
gone) still rings its shard; its calls' leases lapse, as the lease rule says.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Tails:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hand_over(self, finish: Callable[[], None], name: str) -> bool:
        """Run `finish` on the tail thread; False (the caller finishes itself) while an
        earlier tail is still being answered."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return False
            thread = threading.Thread(target=self._guarded, args=(finish,), name=name)
            thread.start()  # kept only once started: `wait` joins it
            self._thread = thread
            return True

    def wait(self) -> None:
        """Until the tail handed over last has been recorded."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()

    @staticmethod
    def _guarded(finish: Callable[[], None]) -> None:
        try:
            finish()
        except Exception:  # logged here: a thread's exception would reach no one
            log.exception("a drain's last calls could not all be recorded")


# The worker process's (`jobs/worker.py` waits for it before it exits).
TAILS = Tails()
