"""Drains: the unit of work is a shard of an identity's lane (`app/shards.py`), not one
message (docs/design.md section 7). `drain(identity_id, lane, token, shard)` is an RQ job.
While it holds its shard (a Redis key with its token, renewed), it repeats a step:

1. Clear the dirty flag; read the identity (paused: stop; unsendable: hold it); record the
   verdicts owed; fail what expired (`app/repo/expiry.py`); count what is due.
2. Take that many pacing slots (`jobs/pacing.py`), or wait for the next.
3. Claim them in one fenced update, each the next of its conversation, and prepare them
   (`jobs/send.py`); call each on a call thread (`jobs/in_flight.py`, `jobs/call.py`);
   collect and record the ends in batches (`jobs/collect.py`, `jobs/record.py`). A reply
   drain looks again while calls are in flight.
4. Listen to the provider: a rate limit slows the identity, a pair limit paces a recipient.

It stops when nothing is due (ringing itself for the next retry or `send_at`) or its slice
ends (ringing itself to the queue's back), releases its key, then re-checks the dirty flag:
nothing committed meanwhile is stranded. A killed drain holds its shard a lease at most.
Its last calls end before it lets go, or, when another job waits for the worker, on the
tail thread (`jobs/tails.py`), which records them and rings the shard.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import current_app
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from app import instruments
from app.config import Config
from app.crypto import get_box
from app.db import get_db
from app.repo.claims import claim_batch, lane_paused
from app.repo.due import count_due, earliest_due
from app.repo.expiry import expire_due
from app.repo.identities import get_identity
from app.repo.shards import lane_shards
from app.shards import Shard
from jobs.collect import Calls
from jobs.pacing import Pacer, Rates
from jobs.queues import (
    clear_dirty,
    get_queue,
    get_redis,
    others_waiting,
    release_drain,
    renew_drain,
    ring_drain,
    whole_second_after,
)
from jobs.record import take_owed_verdicts
from jobs.send import hold_unsendable, prepare_batch, sender_problem
from jobs.tails import TAILS

log = logging.getLogger(__name__)

# Waits for a pacing slot up to this long are spent inside the drain when no other drain
# is waiting for a worker; longer ones are rung through RQ's scheduler.
MAX_INLINE_WAIT = 2.0


def drain(identity_id: int, lane: str, token: str, shard: int = 0) -> str:
    """The RQ job. Returns a summary, for the job's result and the logs."""
    config: Config = current_app.config["RATCHET"]
    redis = get_redis()
    pacer = Pacer(redis, config.pacing_burst, config.pacing_slowdown, config.pair_limit_wait)
    db = get_db()
    drainer = Drain(db, get_box(), config, redis, pacer, identity_id, lane, shard=shard)
    if db.postgresql and not db.bound:  # the tail is recorded on a connection of its own
        drainer.tails, drainer.app = TAILS, current_app._get_current_object()  # type: ignore[attr-defined]
    return drainer.run(token)


def wake_drain(identity_id: int, lane: str, shard: int = 0) -> str:
    """A drain's scheduled return (a retry's time, the next pacing slot), to its shard."""
    ring_shard(identity_id, lane, current_app.config["RATCHET"], shard)
    return "rung"


def ring_shard(
    identity_id: int, lane: str, config: Config, shard: int = 0, *, at: datetime | None = None
) -> bool:
    """Ring one shard's drain, now or at a time (False: Redis is down); which: ringing.py."""
    if at is None:
        lease_ms = int(config.drain_lease_seconds * 1000)
        return ring_drain(drain, identity_id, lane, lease_ms, shard=shard)
    args = (identity_id, lane) if shard == 0 else (identity_id, lane, shard)
    try:
        get_queue(lane).enqueue_at(whole_second_after(at), wake_drain, *args)
    except Exception as exc:  # a RedisError, or the connection refused
        log.warning("could not schedule the %s drain of identity %s: %s", lane, identity_id, exc)
        return False
    return True


@dataclass
class Drain(Calls):
    """A shard's drain: claims and calls (here); collects and records (`jobs/collect.py`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._of = Shard(self.shard)  # of how many: read with the identity at each step

    def run(self, token: str) -> str:
        try:
            return self._run(token)
        finally:
            if self._handed_over is None:
                self._abandon("the drain ended")
                self._in_flight.close()

    def _run(self, token: str) -> str:
        started = self.monotonic()
        again: datetime | None = None
        now_again = False
        why = "done"
        try:
            while True:
                if not renew_drain(*self._keys, token, self.lease_ms, self.shard):
                    # Taken over after our key expired: the new holder owns the dirty flag.
                    # Our calls in flight are begun or due within the pacing horizon (a
                    # step claims no more than the free threads): they end and are counted.
                    self._collect(watch=False)
                    return self._summary("another drain holds this identity and lane now")
                clear_dirty(*self._keys, self.shard)
                step = self._step()
                if step.stop:
                    again = step.again
                    break
                if self.monotonic() - started >= self.config.drain_slice:
                    now_again = True  # the slice is over: to the back of the queue
                    break
            self._end_calls()  # every call ends before the drain lets go, or is handed over
        except (RedisError, SQLAlchemyError) as exc:
            # Redis or the database went away mid-drain. Calls not yet begun are given back
            # (or, without the database, lapse with their lease); the sweeper rings it.
            self._abandon(f"the drain stopped: {exc.__class__.__name__}")
            log.warning(
                "drain %s/%s stopped: %s; the sweeper rings it again",
                self.identity_id,
                self.lane,
                exc.__class__.__name__,
            )
            why = f"stopped: {exc.__class__.__name__}"
        try:
            rung_meanwhile = release_drain(*self._keys, token, self.shard)
            if now_again or rung_meanwhile:
                ring_shard(self.identity_id, self.lane, self.config, self.shard)
            elif again is not None:
                ring_shard(self.identity_id, self.lane, self.config, self.shard, at=again)
        except RedisError as exc:
            log.warning("drain %s/%s could not release: %s", self.identity_id, self.lane, exc)
        return self._summary(why)

    def _ring_again(self) -> None:
        ring_shard(self.identity_id, self.lane, self.config, self.shard)

    def _summary(self, why: str) -> str:
        outcomes = self.outcomes if self._handed_over is None else self._handed_over[0]
        counts = ", ".join(f"{n} {word}" for word, n in sorted(outcomes.items()))
        if self._handed_over is not None:
            why += f"; {self._handed_over[1]} calls in flight handed to the tail thread"
        name = f"{self.identity_id}/{self.lane}" + (f"/{self.shard}" if self.shard else "")
        return f"drain {name}: {counts or 'nothing sent'} ({why})"

    def _step(self) -> _Step:
        now = self.clock()
        pairs = self.pacer.recipient_paces(self.identity_id)
        # 1. The identity, the verdicts owed, and what is due.
        with self.db.transaction() as session:
            identity = get_identity(session, self.identity_id)
            if identity is None or lane_paused(identity, self.lane):
                return _Step(stop=True)  # a resume rings it again
            self._of = Shard(self.shard, lane_shards(identity, self.lane, self.config))
            if self.shard >= self._of.count:  # no such shard here (a lower rate, or another
                for shard in range(self._of.count):  # process's settings): the others take it
                    ring_shard(self.identity_id, self.lane, self.config, shard)
                return _Step(stop=True)
            problem = sender_problem(self.box, identity)
            if problem is not None:
                hold_unsendable(session, identity, problem, now)
                return _Step(stop=True)
            if exhausted := take_owed_verdicts(session, self.identity_id, self.lane, now):
                self.outcomes["failed: exhausted"] += exhausted
            if expired := expire_due(session, self.identity_id, self.lane, now):
                self.outcomes["failed: expired"] += len(expired)
            want = count_due(
                session, *self._keys[1:], now, self.config, pairs.blocked, pairs.paced, self._of
            )
            if want == 0 and not self._in_flight:
                again = earliest_due(session, self.identity_id, self.lane, now, self._of)
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
            if self._hand_over():
                return _Step(stop=True)  # the tail thread rings the shard after its calls
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
        threads = self._in_flight.threads
        cap = self._in_flight.free if self._in_flight else 2 * threads
        # More due than this step takes: a reply drain looks again as soon as a thread is
        # free, instead of waiting for every call (`_collect`).
        self._capped = want > cap or want >= self.config.drain_batch
        if cap <= 0:
            # Every call thread busy, or holding a call for its slot: a pacing wait after
            # a batch larger than the threads (`_wait_inline`) can leave it so. Wait for
            # threads to free up rather than ask for no slots, again and again.
            self._collect(watch=self.lane == "reply", refill=True)
            return _Step()
        due, want = want, min(want, cap)
        # 2. Pacing slots, on Redis's clock. Waiting for one is never an attempt.
        # A campaign's slots are taken several at a time, and may be granted a little
        # ahead, each call held until its own (`jobs/in_flight.py`); a reply is claimed
        # as soon as it has a slot, and sent then.
        campaign = self.lane == "campaign"
        ahead = self.config.pacing_ahead if campaign else 0.0
        grant = self.pacer.take(
            self.identity_id, self.lane, want, rates, other, ahead=ahead, gather=campaign
        )
        if grant.slots == 0:
            self.outcomes["pacing waits"] += 1
            instruments.PACING_WAITS.labels(self.lane).inc()
            instruments.PACING_WAIT_SECONDS.labels(self.lane).inc(grant.wait)
            if self._wait_inline(grant.wait):
                return _Step()
            return _Step(stop=True, again=now + timedelta(seconds=grant.wait))
        # 3. Claim and prepare in one transaction; call each on a thread, record in batches.
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
                shard=self._of,
            )
            identity = get_identity(session, self.identity_id)
            assert identity is not None
            batch, decided = prepare_batch(
                session, self.box, self.config, identity, claims, claimed_mono, now
            )
            for claim, outcome in decided:
                self.outcomes[outcome.split(" ", 1)[0]] += 1
                with self._context(claim):
                    log.info("%s", outcome, extra={"outcome": "no call"})
            # Fewer claimed than granted (another drain holds the rest, or they are a
            # paced recipient's): nothing more to take as a thread frees, only on a ring.
            self._capped = self._capped and len(claims) == grant.slots
            if pairs.paced:
                # Before the claim commits: without Redis it rolls back, nothing stranded.
                paced = set(pairs.paced)
                self.pacer.pair_sends(
                    self.identity_id, [p.recipient for p in batch if p.recipient in paced]
                )
        # Each start counted from now, the claim done, not from the grant: a claim that took
        # 100 ms would otherwise start every call due within it at once, beside those due
        # just after (on a loaded machine, 41 in one second where the slots allow 34).
        # Later than its slot, never earlier; spaced as the slots are.
        claimed = time.monotonic()
        self._in_flight.submit(batch, self._send, [claimed + start for start in grant.starts])
        # All that was due is claimed (or the rest is not claimable now): stop, rather than
        # wait for these calls, when another job waits for this worker.
        counted_all = due < self.config.drain_batch  # `count_due` counts a batch at most
        nothing_left = (counted_all and len(claims) >= due) or len(claims) < grant.slots
        if nothing_left and self._hand_over():
            return _Step(stop=True)  # the tail thread rings the shard after its calls
        if len(claims) == grant.slots < want and self._wait_inline(grant.wait):
            # The pace, not the backlog, set this batch's size: the next step could take
            # nothing before `grant.wait`, so that is spent recording these calls, rather
            # than a step of reads to learn it (the wait was one step in two at 80/s).
            return _Step()
        self._collect(watch=self.lane == "reply", refill=True)
        return _Step()

    def _wait_inline(self, seconds: float) -> bool:
        """Wait `seconds` for a pacing slot here, recording the calls that end meanwhile,
        unless the wait is long or another drain waits for a worker (False: ring again
        instead)."""
        if seconds > MAX_INLINE_WAIT:
            return False
        waited_from = time.monotonic()
        if others_waiting(self.redis, self.lane, within=seconds, identity_id=self.identity_id):
            return False
        self._collect_for(seconds - (time.monotonic() - waited_from))
        return True


@dataclass(frozen=True, slots=True)
class _Step:
    stop: bool = False
    again: datetime | None = None  # ring the drain again at this time
