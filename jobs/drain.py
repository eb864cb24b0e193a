"""Drains: the unit of work is one identity and lane, not one message (DESIGN section 7).

`drain(identity_id, lane, token)` is an RQ job. While it holds its identity and lane (a
Redis key with its token, renewed as it goes), it repeats:

1. Clear the dirty flag, then read the identity (paused: stop; unsendable: hold it), record
   the verdicts that are owed, and count what is due (at most one batch).
2. Take that many pacing slots (`jobs/pacing.py`). None free: wait for the next one if
   nobody else is waiting for a worker, else hand the worker back and ring itself.
3. Claim that many due messages in one fenced update (`claim_batch`), prepare each in the
   same transaction, then call the provider for each concurrently and record each outcome
   with its own fenced write: the per-message step (`call_and_record`) the send job uses.
   On the reply lane the drain does not wait for those calls to end before it looks again:
   a ring that arrives while they are in flight (the dirty flag, looked at every 50 ms
   while a call thread is free) starts the next step, which claims no more than the free
   threads, so a reply never waits behind another reply's slow call and its record.
4. Provider feedback: a rate-limit answer slows the identity; a pair limit paces that one
   recipient.

It stops when nothing is due (ringing itself for the earliest retry, if any) or its time
slice ends (ringing itself now, at the back of the queue, so other identities get a turn).
Before it exits it releases its key and re-checks the dirty flag, so a message committed
while it was finishing is never stranded. A killed or stopped drain strands its identity
no longer than its key's lease; the sweeper rings drains for whatever is due.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app import instruments
from app.clock import utcnow
from app.config import Config
from app.crypto import SecretBox, get_box
from app.db import Database, get_db
from app.lifecycle import Status
from app.logs import log_context
from app.models import Message
from app.providers.base import FailureClass, SendResult
from app.repo.claims import (
    CLAIM_ORDER,
    claim_batch,
    claimable,
    earliest_due,
    lane_paused,
    plan_without_sorts,
)
from app.repo.identities import get_identity
from app.repo.sending import insert_attempts, take_verdict
from jobs.pacing import Pacer, Rates
from jobs.queues import (
    clear_dirty,
    get_queue,
    get_redis,
    is_dirty,
    release_drain,
    renew_drain,
    ring_drain,
    whole_second_after,
)
from jobs.send import (
    Prepared,
    call_and_record,
    credentials_for,
    hold_unsendable,
    prepare,
    sender_problem,
)

log = logging.getLogger(__name__)

# Provider codes that mean "this identity is sending too fast" (not one recipient).
SLOW_DOWN_CODES = frozenset({130429, 80007, 4, 20429})
# Waits for a pacing slot up to this long are spent inside the drain when no other drain
# is waiting for a worker; longer ones are rung through RQ's scheduler.
MAX_INLINE_WAIT = 2.0
# A drain rung to the back of the queue (a slice's end) waits there a moment even when a
# worker is idle: a job still queued after this long has no worker to take it. Without the
# grace, a drain short of a slot at that moment handed its worker back and came back
# through RQ's scheduler, a whole second or more later (likely the 1 s gap, at a slice's
# end, in a 10/s identity's sends in bench/pacing.py on 2026-12-03).
IDLE_WORKER_GRACE = 0.05
# While a reply drain's calls are in flight and a call thread is free, it looks this often
# for a ring (the dirty flag), and claims what was rung without waiting for those calls to
# end. A call that ends wakes it at once; the poll only matters behind a slow call, where
# it saves the rest of that call's wait for 20 round trips a second.
RING_WATCH_SECONDS = 0.05


def drain(identity_id: int, lane: str, token: str) -> str:
    """The RQ job. Returns a summary, for the job's result and the logs."""
    config: Config = current_app.config["RATCHET"]
    redis = get_redis()
    pacer = Pacer(redis, config.pacing_burst, config.pacing_slowdown, config.pair_limit_wait)
    return Drain(get_db(), get_box(), config, redis, pacer, identity_id, lane).run(token)


def wake_drain(identity_id: int, lane: str) -> str:
    """A drain's scheduled return (a retry's time, the next pacing slot)."""
    config: Config = current_app.config["RATCHET"]
    ring_identity(identity_id, lane, config)
    return "rung"


def ring_identity(
    identity_id: int, lane: str, config: Config, *, at: datetime | None = None
) -> bool:
    """Ring the drain of an identity and lane, now or at a time (False: Redis is down)."""
    if at is None:
        return ring_drain(drain, identity_id, lane, int(config.drain_lease_seconds * 1000))
    try:
        get_queue(lane).enqueue_at(whole_second_after(at), wake_drain, identity_id, lane)
    except Exception as exc:  # a RedisError, or the connection refused
        log.warning("could not schedule the %s drain of identity %s: %s", lane, identity_id, exc)
        return False
    return True


@dataclass
class Drain:
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
    # The threads that call the provider, kept for the whole run: starting a pool's threads
    # for every batch cost more CPU than one send's log line.
    _calls: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    # Calls submitted and not yet collected, oldest first: a reply drain goes on to claim
    # what was rung while these are in flight (`_collect`).
    _in_flight: list[Future[tuple[str, object]]] = field(
        default_factory=list, init=False, repr=False
    )
    _watching: bool = field(default=True, init=False, repr=False)
    # The last step left due messages unclaimed for want of a free call thread: on the
    # reply lane the next step starts as soon as one frees up, not when all have.
    _capped: bool = field(default=False, init=False, repr=False)

    @property
    def lease_ms(self) -> int:
        return int(self.config.drain_lease_seconds * 1000)

    @property
    def _threads(self) -> int:
        """Provider calls in flight at once, at most."""
        return max(1, self.config.drain_concurrency)

    def run(self, token: str) -> str:
        try:
            return self._run(token)
        finally:
            self._abandon()
            if self._calls is not None:
                self._calls.shutdown(wait=True)
                self._calls = None

    def _run(self, token: str) -> str:
        started = self.monotonic()
        again: datetime | None = None
        now_again = False
        why = "done"
        try:
            while True:
                if not renew_drain(self.redis, self.identity_id, self.lane, token, self.lease_ms):
                    # Taken over after our key expired: the new holder owns the dirty flag.
                    # Our calls in flight are all begun (a step claims no more than the
                    # free threads): they end and are counted.
                    self._collect(watch=False)
                    return self._summary("another drain holds this identity and lane now")
                clear_dirty(self.redis, self.identity_id, self.lane)
                step = self._step()
                if step.stop:
                    again = step.again
                    break
                if self.monotonic() - started >= self.config.drain_slice:
                    now_again = True  # the slice is over: to the back of the queue
                    break
            self._collect(watch=False)  # every call ends before the drain lets go
        except (RedisError, SQLAlchemyError) as exc:
            # Redis or the database went away mid-drain. Whatever was claimed stays leased
            # and becomes due again when the lease expires; the sweeper rings the drain.
            self._abandon()
            log.warning(
                "drain %s/%s stopped: %s; the sweeper rings it again",
                self.identity_id,
                self.lane,
                exc.__class__.__name__,
            )
            why = f"stopped: {exc.__class__.__name__}"
        try:
            rung_meanwhile = release_drain(self.redis, self.identity_id, self.lane, token)
            if now_again or rung_meanwhile:
                ring_identity(self.identity_id, self.lane, self.config)
            elif again is not None:
                ring_identity(self.identity_id, self.lane, self.config, at=again)
        except RedisError as exc:
            log.warning("drain %s/%s could not release: %s", self.identity_id, self.lane, exc)
        return self._summary(why)

    def _summary(self, why: str) -> str:
        counts = ", ".join(f"{n} {word}" for word, n in sorted(self.outcomes.items()))
        return f"drain {self.identity_id}/{self.lane}: {counts or 'nothing sent'} ({why})"

    def _step(self) -> _Step:
        now = self.clock()
        pairs = self.pacer.recipient_paces(self.identity_id)
        # 1. The identity, the verdicts owed, and what is due.
        with self.db.transaction() as session:
            identity = get_identity(session, self.identity_id)
            if identity is None or lane_paused(identity, self.lane):
                return _Step(stop=True)  # a resume rings it again
            problem = sender_problem(self.box, identity)
            if problem is not None:
                hold_unsendable(session, identity, problem, now)
                return _Step(stop=True)
            for message_id in owed_verdicts(session, self.identity_id, self.lane, now):
                verdict = take_verdict(session, message_id, now)
                if verdict is not None:
                    self.outcomes["failed: exhausted"] += 1
                if verdict is not None and verdict.applied:
                    with log_context(
                        message_id=message_id, identity_id=self.identity_id, lane=self.lane
                    ):
                        log.info(
                            "failed: exhausted (after the webhook grace)",
                            extra={"outcome": "failed"},
                        )
            want = count_due(
                session, self.identity_id, self.lane, now, self.config, pairs.blocked, pairs.paced
            )
            if want == 0 and not self._in_flight:
                again = earliest_due(session, self.identity_id, self.lane, now)
                if pairs.next_free is not None:
                    # Messages to a pair-limited recipient are due, only held back: come
                    # back when it may be sent to again (harmless if it has none).
                    unblocked = now + timedelta(seconds=pairs.next_free)
                    again = unblocked if again is None else min(again, unblocked)
                return _Step(stop=True, again=again)
            rates = Rates(
                lane=identity.reply_rate if self.lane == "reply" else identity.campaign_rate,
                total=identity.total_rate,
            )
            other = identity.campaign_rate if self.lane == "reply" else identity.reply_rate
        if want == 0:
            # Rung for nothing new while an earlier step's calls are in flight: wait for
            # them (or the next ring), then look again.
            self._capped = False
            self._collect(watch=self.lane == "reply")
            return _Step()
        # With calls in flight (a reply drain looking again), no more than the free call
        # threads: a reply claimed now must not queue behind a slow call. Otherwise up to
        # twice the threads: the second half queues behind the first, halving the claim's
        # cost per message; a queued call that could start only past its lease's latest
        # start (a slow provider) stands down and gives its message back unsent, due again
        # at once (`stand_down`), and the cap bounds that waste.
        cap = self._threads - len(self._in_flight) if self._in_flight else 2 * self._threads
        # More due than this step takes: a reply drain looks again as soon as a thread is
        # free, instead of waiting for every call (`_collect`).
        self._capped = want > cap or want >= self.config.drain_batch
        want = min(want, cap)
        # 2. Pacing slots, on Redis's clock. Waiting for one is never an attempt.
        grant = self.pacer.take(self.identity_id, self.lane, want, rates, other)
        if grant.slots == 0:
            self.outcomes["pacing waits"] += 1
            instruments.PACING_WAITS.labels(self.lane).inc()
            instruments.PACING_WAIT_SECONDS.labels(self.lane).inc(grant.wait)
            if grant.wait <= MAX_INLINE_WAIT:
                waited_from = time.monotonic()
                if not self._others_waiting(within=grant.wait):
                    time.sleep(max(0.0, grant.wait - (time.monotonic() - waited_from)))
                    return _Step()
            return _Step(stop=True, again=now + timedelta(seconds=grant.wait))
        # 3. Claim and prepare in one transaction; call and record each concurrently.
        lease = timedelta(seconds=self.config.lease_seconds)
        with self.db.transaction() as session:
            # Both clocks read together, the monotonic one first: the lease is stamped from
            # `now`, and the pre-call check measures from `claimed_mono`, so a pause between
            # the two readings can only shorten the time the check allows, never stretch it.
            claimed_mono = self.monotonic()
            now = self.clock()
            claims = claim_batch(
                session,
                self.identity_id,
                self.lane,
                grant.slots,
                now,
                lease,
                skip_recipients=pairs.blocked,
                one_each=pairs.paced,
                hold=timedelta(seconds=self.config.conversation_hold),
            )
            identity = get_identity(session, self.identity_id)
            assert identity is not None
            # The batch's rows in one read, after the claim wrote them.
            loaded = {
                message.id: message
                for message in session.scalars(
                    select(Message)
                    .where(Message.id.in_([claim.message_id for claim in claims]))
                    .execution_options(populate_existing=True)
                )
            }
            credentials = credentials_for(self.box, identity, self.config.public_base_url)
            batch: list[Prepared] = []
            attempt_rows: list[dict[str, Any]] = []
            for claim in claims:
                prepared = prepare(
                    session,
                    self.box,
                    self.config,
                    identity,
                    claim,
                    claimed_mono,
                    now,
                    message=loaded[claim.message_id],
                    attempt_rows=attempt_rows,
                    credentials=credentials,
                )
                if isinstance(prepared, Prepared):
                    batch.append(prepared)
                else:
                    self.outcomes[prepared[0].split(" ", 1)[0]] += 1
                    with log_context(
                        message_id=claim.message_id,
                        attempt=claim.attempt,
                        identity_id=self.identity_id,
                        lane=self.lane,
                    ):
                        log.info("%s", prepared[0], extra={"outcome": "no call"})
            insert_attempts(session, attempt_rows)
            # Fewer claimed than granted (another drain holds the rest, or they are a
            # paced recipient's): nothing more to take as a thread frees, only on a ring.
            self._capped = self._capped and len(claims) == grant.slots
            if pairs.paced:
                # Before the claim commits: without Redis it rolls back, nothing stranded.
                paced = set(pairs.paced)
                self.pacer.pair_sends(
                    self.identity_id, [p.recipient for p in batch if p.recipient in paced]
                )
        if batch:
            if self._calls is None:
                self._calls = ThreadPoolExecutor(
                    max_workers=self._threads,
                    thread_name_prefix=f"drain-{self.identity_id}-{self.lane}",
                )
            self._in_flight += [self._calls.submit(self._send, prepared) for prepared in batch]
        self._collect(watch=self.lane == "reply")
        return _Step()

    def _collect(self, *, watch: bool) -> None:
        """Wait for the calls in flight and count their outcomes.

        `watch` (the reply lane): return as soon as a ring arrives while some are still in
        flight and a call thread is free, so a reply committed during another reply's call
        is claimed and sent now, not after that call and its record; and as soon as a
        thread is free when the last step left replies due for want of one. The calls left in
        flight are collected by a later step, and all of them before the drain lets go.
        """
        try:
            while self._in_flight:
                if watch and self._capped and len(self._in_flight) < self._threads:
                    return  # replies already due wait for a thread, not for every call
                # Polling only while a ring could be acted on: with every thread busy, the
                # next call to end is what to wait for.
                looking = watch and self._watching and len(self._in_flight) < self._threads
                done, _ = wait(
                    self._in_flight,
                    timeout=RING_WATCH_SECONDS if looking else None,
                    return_when=FIRST_COMPLETED,
                )
                for call in [call for call in self._in_flight if call in done]:
                    self._in_flight.remove(call)
                    self._count(call)
                if looking and self._in_flight and self._rung():
                    return
        except BaseException:
            self._abandon()
            raise

    def _count(self, call: Future[tuple[str, object]]) -> None:
        outcome, _ = call.result()
        self.outcomes[outcome.split(" ", 1)[0].rstrip(":")] += 1

    def _abandon(self) -> None:
        """The database or Redis went away, or the job is cut short: no call not yet begun
        is made (its claim lapses and it is due again), and this returns only when those
        begun have ended."""
        calls, self._in_flight = self._in_flight, []
        for call in calls:
            call.cancel()
        wait(calls)
        for call in calls:  # what those that ended did is still counted
            if not call.cancelled() and call.exception() is None:
                self._count(call)

    def _rung(self) -> bool:
        """A ring since this step cleared the dirty flag: something new may be due.

        Without Redis the drain stops watching and waits for its calls as the campaign lane
        does: what was claimed is still sent, and the next renewal ends the drain."""
        try:
            return is_dirty(self.redis, self.identity_id, self.lane)
        except RedisError as exc:
            log.warning(
                "drain %s/%s stopped watching for rings: %s", self.identity_id, self.lane, exc
            )
            self._watching = False
            return False

    def _send(self, prepared: Prepared) -> tuple[str, object]:
        def feedback(result: SendResult) -> None:
            # 4. The provider's word on our pace, after the outcome is recorded, and best
            # effort: without Redis the pace is simply not adjusted this time.
            try:
                adjust(result)
            except RedisError as exc:
                log.warning("identity %s: pace not adjusted: %s", self.identity_id, exc)

        def adjust(result: SendResult) -> None:
            code = result.error.code if result.error else None
            if result.failure is FailureClass.RATE_LIMITED and code in SLOW_DOWN_CODES:
                factor = self.pacer.slow_down(self.identity_id)
                log.warning(
                    "provider rate limit (%s): the identity's pace x%s for a minute", code, factor
                )
            elif result.failure is FailureClass.PAIR_LIMITED:
                self.pacer.pair_limited(self.identity_id, prepared.recipient)

        outcome, next_ring = call_and_record(
            self.db, self.config, prepared, self.clock, self.monotonic, on_result=feedback
        )
        # The one line per send outcome; the log's formatter names the message, attempt,
        # identity and lane from the context.
        with log_context(
            message_id=prepared.claim.message_id,
            attempt=prepared.claim.attempt,
            identity_id=self.identity_id,
            lane=self.lane,
        ):
            log.info("%s", outcome, extra={"outcome": outcome.split(" ", 1)[0].rstrip(":")})
        return outcome, next_ring

    def _others_waiting(self, *, within: float) -> bool:
        """Other drains queued for this lane's workers and still there after a moment (no
        idle worker took them): hand the worker back to them. The moment is at most
        `within`, the wait this drain has ahead anyway."""
        try:
            queue = get_queue(self.lane, self.redis)
            if queue.count == 0:
                return False
            time.sleep(min(IDLE_WORKER_GRACE, within))
            return queue.count > 0
        except Exception:
            return False


@dataclass(frozen=True, slots=True)
class _Step:
    stop: bool = False
    again: datetime | None = None  # ring the drain again at this time


def count_due(
    session: Session,
    identity_id: int,
    lane: str,
    now: datetime,
    config: Config,
    blocked: Sequence[str] = (),
    paced: Sequence[str] = (),
) -> int:
    """How many messages of this identity and lane may be claimed now, up to one batch:
    none to a `blocked` recipient, one to each `paced` one (as `claim_batch` takes them)."""
    due = claimable(identity_id, lane, now, timedelta(seconds=config.conversation_hold))
    query = select(Message.id).where(*due)
    skip = [*blocked, *paced]
    if skip:
        query = query.where(Message.recipient.not_in(skip))
    # In the claim's order, so read as the claim reads (see `plan_without_sorts`).
    plan_without_sorts(session)
    limited = query.order_by(CLAIM_ORDER).limit(config.drain_batch).subquery()
    count = session.scalar(select(func.count()).select_from(limited)) or 0
    if paced:
        count += (
            session.scalar(
                select(func.count(func.distinct(Message.recipient))).where(
                    *due, Message.recipient.in_(paced)
                )
            )
            or 0
        )
    return min(count, config.drain_batch)


def owed_verdicts(session: Session, identity_id: int, lane: str, now: datetime) -> list[int]:
    """Messages of this identity and lane whose grace wait is over and owe a verdict."""
    plan_without_sorts(session)
    return list(
        session.scalars(
            select(Message.id)
            .where(
                Message.identity_id == identity_id,
                Message.lane == lane,
                Message.status == Status.SENDING.value,
                Message.pending_verdict.is_not(None),
                Message.next_attempt_at <= now,
            )
            # Oldest first, as `ix_messages_owed_verdicts` gives them (`plan_without_sorts`).
            .order_by(Message.next_attempt_at)
            .limit(100)
        )
    )
