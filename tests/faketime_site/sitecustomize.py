"""Loaded (through PYTHONPATH) only by the children `tests/faketime.py` skews.

Debian's libfaketime 0.9.10, with the monotonic clock left real, answers Python's
`time.sleep` (an absolute `clock_nanosleep` on the monotonic clock) with EINVAL, even
for zero seconds. Every other wait (`select`, locks, events, sockets) works. So in these
children `time.sleep` waits in `select` instead: the same wait, on a call the library
leaves alone. Nothing of ours is changed; only the operating system's answer.
"""

import select
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    select.select([], [], [], seconds)


time.sleep = _sleep
