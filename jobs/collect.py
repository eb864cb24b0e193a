"""A drain's calls in flight, collected and recorded: the second half of the send path
(`jobs/drain.py` claims and calls; this waits for the calls to end and records them).

`Calls` holds what a drain is made of (its identity, lane and shard, its database, Redis
and pacer, its call threads) and the methods that run on the drain's own thread while its
calls are in flight:

- `_collect`: wait for calls, record each batch of ends in one transaction (`_record`,
  `record_batch` in `jobs/call.py`), then listen to the provider's word on our pace and
  write one log line per send outcome;
- `_collect_for`: a pacing wait spent the same way, the ends recorded together;
- `_abandon`: the job is cut short or a store went away: calls not begun are given back
  as never sent, and those begun are recorded;
- `_end_calls`: the drain's end: every call collected, unless handed to the tail thread
  (`jobs/tails.py`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime

from flask import Flask
from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from app.clock import utcnow
from app.config import Config
from app.crypto import SecretBox
from app.db import Database
from app.logs import log_context
from app.repo.claims import Claim
from jobs.call import Called, Prepared, call, give_back, record_batch
from jobs.in_flight import InFlight
from jobs.pacing import Pacer, listen
from jobs.queues import get_queue, is_dirty
from jobs.tails import Tails

# The one line per send outcome keeps the name it has always had (docs/metrics.md).
log = logging.getLogger("jobs.drain")

# While a reply drain's calls are in flight and a call thread is free, it looks this often
# for a ring (the dirty flag), and claims what was rung without waiting for those calls to
# end. A call that ends wakes it at once; the poll only matters behind a slow call, where
# it saves the rest of that call's wait for 20 round trips a second.
RING_WATCH_SECONDS = 0.05


@dataclass
class Calls:
    db: Database
    box: SecretBox
    config: Config
    redis: Redis
    pacer: Pacer
    identity_id: int
    lane: str
    clock: Callable[[], datetime] = utcnow
    monotonic: Callable[[], float] = time.monotonic
    outcomes: Counter[str] = field(default_factory=Counter)
    shard: int = 0  # of the lane's shards: this drain claims only that one's messages
    # Its last calls may be answered on the process's tail thread, in this app's context.
    tails: Tails | None = None
    app: Flask | None = None
    # Calls submitted and not yet collected: a reply drain goes on to claim what was rung
    # while these are in flight (`_collect`).
    _in_flight: InFlight = field(init=False, repr=False)
    _watching: bool = field(default=True, init=False, repr=False)
    # The last step left due messages unclaimed for want of a free call thread: on the
    # reply lane the next step starts as soon as one frees up, not when all have.
    _capped: bool = field(default=False, init=False, repr=False)
    # The ends being recorded: cut short before their commit (the job's time ran out), they
    # are recorded again by `_abandon` (a record committed already changes nothing: fenced).
    _recording: list[Called] = field(default_factory=list, init=False, repr=False)
    # Handed to the tail thread: the outcomes counted until then, and the calls handed.
    _handed_over: tuple[Counter[str], int] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        name = f"drain-{self.identity_id}-{self.lane}-{self.shard}"
        self._in_flight = InFlight(self.config.drain_concurrency, name)

    @property
    def _keys(self) -> tuple[Redis, int, str]:
        return self.redis, self.identity_id, self.lane

    @property
    def lease_ms(self) -> int:
        return int(self.config.drain_lease_seconds * 1000)

    def _end_calls(self) -> None:
        """Wait for the calls in flight (or hand them over); with no job queued, wait for
        the tail thread's calls too, so the worker goes idle with none in flight."""
        if self._handed_over is None and not self._hand_over():
            self._collect(watch=False)
            if self.tails is not None and get_queue(self.lane, self.redis).count == 0:
                self.tails.wait()

    def _collect(self, *, watch: bool, refill: bool = False) -> None:
        """Wait for the calls in flight and record their ends, a batch at a time.

        `refill`: return when the last step left messages due for want of call threads and
        enough are free again (a batch's worth, at most half the threads; one on the reply
        lane), so the calls in flight follow the pace (rate x answer time), not one batch
        at a time.
        `watch` (the reply lane): also return as soon as a ring arrives while a call thread
        is free, so a reply committed during another reply's call is claimed and sent now,
        not after that call and its record. The calls left in flight are collected by a
        later step, and all of them before the drain lets go.
        """
        enough = 1 if watch else max(1, min(self.config.drain_batch, self._in_flight.threads // 2))
        try:
            while self._in_flight:
                free = self._in_flight.free
                if refill and self._capped and free >= enough:
                    return  # what is already due waits for a thread, not for every call
                # Polling only while a ring could be acted on: with every thread busy, the
                # next call to end is what to wait for.
                looking = watch and self._watching and free > 0
                self._record(self._in_flight.wait(RING_WATCH_SECONDS if looking else None))
                if looking and self._in_flight and self._rung():
                    return
        except BaseException as exc:
            self._abandon(f"the drain was cut short: {exc.__class__.__name__}")
            raise

    def _collect_for(self, seconds: float) -> None:
        """A pacing wait, spent recording the calls that end meanwhile: together, once all
        have ended or the wait is over, since nothing is claimed before then. Recorded as
        each ended, a few calls answered a few milliseconds apart took a transaction each
        (`bench/send_rate.py --low-rate`)."""
        until = time.monotonic() + seconds
        try:
            while self._in_flight and (left := until - time.monotonic()) > 0:
                self._record(self._in_flight.wait(left, every=True))
        except BaseException as exc:
            self._abandon(f"the drain was cut short: {exc.__class__.__name__}")
            raise
        time.sleep(max(0.0, until - time.monotonic()))

    def _record(self, calls: list[Called]) -> None:
        """3. The ends collected, recorded in one transaction (`record_batch`); then for
        each 4., the provider's word on our pace, and the one log line per send outcome
        (its context names the message, attempt, identity and lane)."""
        self._recording = calls
        recorded = record_batch(self.db, self.config, calls, self.clock)
        self._recording = []
        for called, outcome, _ in recorded:
            kind = outcome.split(" ", 1)[0].rstrip(":")
            self.outcomes[kind] += 1
            with self._context(called.prepared.claim):
                if called.result is not None:
                    listen(self.pacer, self.identity_id, called.prepared.recipient, called.result)
                log.info("%s", outcome, extra={"outcome": kind})

    def _context(self, claim: Claim) -> AbstractContextManager[None]:  # a send's log lines
        context = {"message_id": claim.message_id, "attempt": claim.attempt}
        return log_context(**context, identity_id=self.identity_id, lane=self.lane)

    def _abandon(self, why: str) -> None:
        """The database or Redis went away, or the job is cut short: no call not yet begun
        is made, and each is given back as never sent (`give_back`); this returns only
        when those begun have ended, and records what they did (without the database,
        their leases lapse: unknown outcomes, as the lease rule says)."""
        ended, unsent = self._in_flight.abandon()
        ended, self._recording = [*self._recording, *ended], []
        try:
            self._record(ended)
        except SQLAlchemyError as exc:
            log.warning("%d answers not recorded (%s): their leases lapse", len(ended), exc)
        if give_back(self.db, unsent, self.clock(), why):
            self.outcomes["given back"] += len(unsent)

    def _rung(self) -> bool:
        """A ring since this step cleared the dirty flag: something new may be due.

        Without Redis the drain stops watching and waits for its calls as the campaign lane
        does: what was claimed is still sent, and the next renewal ends the drain."""
        try:
            return is_dirty(*self._keys, self.shard)
        except RedisError as exc:
            log.warning(
                "drain %s/%s stopped watching for rings: %s", self.identity_id, self.lane, exc
            )
            self._watching = False
            return False

    def _send(self, prepared: Prepared) -> Called:
        """On a call thread: the call alone, no database (`call`)."""
        return call(self.config, prepared, self.monotonic, self.clock)

    def _hand_over(self) -> bool:
        """Nothing more is due: when another job waits for this worker, hand the calls in
        flight to the tail thread (`jobs/tails.py`) and stop, rather than wait for them.
        Not a reply drain: it watches for rings while its calls end, so a new reply to
        its number is claimed at once, not behind the job that waits."""
        if self.tails is None or not self._in_flight or self.lane != "campaign":
            return False
        if get_queue(self.lane, self.redis).count == 0:
            return False
        # Set before the tail starts: from then on this thread must not touch the calls
        # (`run` leaves them alone even if the job is cut short here).
        self._handed_over = Counter(self.outcomes), len(self._in_flight)
        name = f"tail-{self.identity_id}-{self.lane}-{self.shard}"
        if not self.tails.hand_over(self._finish_tail, name):
            self._handed_over = None
            return False
        return True

    def _finish_tail(self) -> None:
        """On the tail thread: record the calls handed over, then ring the shard."""
        assert self.app is not None
        name = f"{self.identity_id}/{self.lane}/{self.shard}"
        with self.app.app_context():
            try:
                self._collect(watch=False)
            except (RedisError, SQLAlchemyError) as exc:
                # A store went away (a restart, say): one line, as a drain's own stop, and
                # `_abandon` has said which answers were not recorded.
                log.warning("the tail of drain %s stopped: %s", name, exc.__class__.__name__)
            finally:
                self._in_flight.close()
                # Even when the record failed: the drain let go without looking again, and
                # what was recorded may have made a message due.
                try:
                    self._ring_again()
                except Exception as exc:  # the sweeper rings it later
                    log.warning("the tail of drain %s could not ring: %s", name, exc)

    def _ring_again(self) -> None:
        """Ring this drain's shard (`jobs/drain.py`)."""
        raise NotImplementedError
