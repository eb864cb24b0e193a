"""Our clock. Code that decides takes `now` as an argument; only the edges read this.

Every time two processes compare (a lease and its expiry, a claim against a resume or a
credential change, a retry's due time) is read on the database server's clock, whatever
machine stamped it: `utcnow()` is this process's wall clock plus its offset from the
database's, which the engine measures and keeps fresh (`app/db_clock.py`). Until it is
measured (and on SQLite, where every process shares the machine's clock) the offset is
zero. Durations within one process stay on its monotonic clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

# The database's clock minus this process's wall clock, and when it was measured (this
# process's monotonic clock; None: never). Replaced whole, so a thread reads either the
# old pair or the new one.
_offset: tuple[timedelta, float | None] = (timedelta(0), None)


def utcnow() -> datetime:
    return datetime.now(UTC) + _offset[0]


def clock_offset() -> timedelta:
    """The database's clock minus this process's wall clock, as last measured."""
    return _offset[0]


def is_offset_older_than(seconds: float) -> bool:
    """Whether the offset was measured more than `seconds` ago, or never."""
    measured = _offset[1]
    return measured is None or time.monotonic() - measured > seconds


# A reading whose round trip took longer is dropped (the offset kept as it was): the
# server read its clock somewhere inside the round trip, so a slow one (a stalled answer,
# a pause of this process) could put this process's clock off by half of it.
MAX_ROUND_TRIP = 0.5


def measure_offset(
    read_server_clock: Callable[[], datetime],
    monotonic: Callable[[], float] = time.monotonic,
) -> timedelta | None:
    """Read the server's clock once and keep its offset from ours; None (and the offset
    left as it was) when the round trip took more than `MAX_ROUND_TRIP`.

    The server read its clock somewhere inside the round trip; taking the midpoint (as NTP
    does) is wrong by at most half the round trip, a millisecond or so on a LAN. The round
    trip is timed on the monotonic clock, so a wall-clock step during it changes nothing."""
    started = monotonic()
    wall = datetime.now(UTC)
    server = read_server_clock()
    ended = monotonic()
    if ended - started > MAX_ROUND_TRIP:
        return None
    offset = server - (wall + timedelta(seconds=(ended - started) / 2))
    set_offset(offset, ended)
    return offset


def set_offset(offset: timedelta, measured_at: float | None) -> None:
    global _offset
    _offset = (offset, measured_at)
