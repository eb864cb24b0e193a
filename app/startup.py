"""What every long-running process does once it has started (`wsgi.py`, the workers)."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Leave what start-up built (modules, classes, functions: about 150,000 objects in a
    worker) out of every later garbage collection.

    A full collection walks every object the process holds, and no thread of the process
    runs meanwhile. In a reply worker behind a campaign backlog on a busy 2-core machine
    one took 200 to 300 ms (measured on 2026-12-03): every reply rung during it waited,
    and those few waits were the p99 of `bench/pacing.py` (147 to 259 ms behind the
    backlog, against 35 to 58 ms idle; 62 to 101 ms behind it since). Frozen, a
    collection walks only what the process made since. Called again after later imports
    (a worker's RQ), it freezes those too.
    """
    gc.collect()
    gc.freeze()
