"""The dashboard's sign-in throttle, in the database (it works while Redis is down).

Two counters slow a guesser (`SignInThrottle` rows):

- per client address: 20 failures in a 15-minute window, then the address waits for the
  window's end (whatever email it tries);
- per account and address pair: 5 failures free, then each further attempt waits 30 s,
  1 min, 2 min... up to 15 min after the last one, until a success or a quiet day.

Nothing counts per account alone, so nobody can lock a named person out by guessing from
elsewhere. An attempt is counted *before* its password is checked, with both rows locked
(`reserve_attempt`, its own short transaction), and handed back when the password was
right (`settle_attempt`): N guesses at once get at most the limit's checks, where a read
of the count followed by a write let them all through.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.models import SignInThrottle
from app.repo.sql import insert_ignoring_conflict

WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_ADDRESS = 20
FREE_FAILURES_PER_PAIR = 5
FIRST_PAIR_DELAY = timedelta(seconds=30)
MAX_PAIR_DELAY = timedelta(minutes=15)
KEEP = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Keys:
    address: str
    pair: str


def keys_for(email: str, address: str) -> Keys:
    return Keys(f"address {address}", f"pair {address} {email}")


def pair_delay(failures: int) -> timedelta:
    """How long after its last attempt a pair with `failures` in a row waits (0: none)."""
    if failures < FREE_FAILURES_PER_PAIR:
        return timedelta(0)
    doublings = min(failures - FREE_FAILURES_PER_PAIR, 10)
    return min(MAX_PAIR_DELAY, FIRST_PAIR_DELAY * 2**doublings)


def reserve_attempt(session: Session, email: str, address: str, now: datetime) -> timedelta:
    """Count one attempt as a failure before its password is checked, or refuse it.

    Returns how long the caller must wait (nothing was counted), or 0: go ahead and check
    the password, then call `settle_attempt`. The caller commits at once, so the count is
    seen by every other attempt before this one's slow password check begins."""
    keys = keys_for(email, address)
    # Prune what no throttle decision reads any more (indexed on updated_at).
    session.execute(delete(SignInThrottle).where(SignInThrottle.updated_at < now - KEEP))
    for key in (keys.address, keys.pair):
        insert_ignoring_conflict(
            session,
            SignInThrottle.__table__,
            {"key": key, "failures": 0, "window_started_at": now, "updated_at": now},
            ["key"],
        )
    # Both rows locked, in key order (two attempts never wait on each other crosswise).
    rows = {
        row.key: row
        for row in session.scalars(
            select(SignInThrottle)
            .where(SignInThrottle.key.in_((keys.address, keys.pair)))
            .order_by(SignInThrottle.key)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    }
    by_address, by_pair = rows[keys.address], rows[keys.pair]
    address_failures = by_address.failures
    window_started_at = by_address.window_started_at
    if window_started_at <= now - WINDOW:
        address_failures, window_started_at = 0, now
    wait = timedelta(0)
    if address_failures >= MAX_FAILURES_PER_ADDRESS:
        wait = window_started_at + WINDOW - now
    if by_pair.failures:
        wait = max(wait, by_pair.updated_at + pair_delay(by_pair.failures) - now)
    if wait > timedelta(0):
        return max(wait, timedelta(seconds=1))
    session.execute(
        update(SignInThrottle)
        .where(SignInThrottle.key == keys.address)
        .values(failures=address_failures + 1, window_started_at=window_started_at, updated_at=now)
    )
    session.execute(
        update(SignInThrottle)
        .where(SignInThrottle.key == keys.pair)
        .values(failures=SignInThrottle.failures + 1, updated_at=now)
    )
    return timedelta(0)


def settle_attempt(session: Session, email: str, address: str, succeeded: bool) -> None:
    """A right password hands its counted failure back and clears the pair's run; a wrong
    one stays counted."""
    if not succeeded:
        return
    keys = keys_for(email, address)
    session.execute(delete(SignInThrottle).where(SignInThrottle.key == keys.pair))
    session.execute(
        update(SignInThrottle)
        .where(SignInThrottle.key == keys.address, SignInThrottle.failures > 0)
        .values(failures=SignInThrottle.failures - 1)
    )
