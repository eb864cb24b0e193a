"""A fault run's schedule, shared by the run in `make test` and `make chaos` (only the sizes
differ: `Plan`), and the injector that fires it while the messages go out.

Sending-phase faults fire on progress (the share of messages finished), so every one
lands mid-run; the kills at random moments drawn from the plan's seed:

- SIGKILL of a worker at random moments (one aimed at a worker draining while a send the
  sandbox accepted is not yet answered, one made by the `AnswerGate` as an answer reaches
  its worker), each replaced by a fresh worker;
- SIGSTOP of a worker busy on a drain at 25 %, SIGCONT once its drain's lease has run out;
- Redis flushed at a third (queues, scheduled rings, the worker registry);
- PostgreSQL restarted in immediate mode at half (every connection cut mid-whatever);
- from 60 %, connections cut mid-transaction one at a time, the server up;
- the operator (`Operator`, its own thread): cancels through the API, pauses and resumes
  the identity through the CLI, requeues the dead letters through the CLI.

What actually happened is counted in `happened` (the run prints it).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass

import psycopg
from redis import Redis
from rq import Queue, Worker
from rq.job import Job
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError

from app.clock import utcnow
from app.db import Database
from app.models import Message
from jobs.queues import queue_name

from .answer_gate import AnswerGate
from .clients import Client
from .system import System

TIMEOUT_AFTER_ACCEPT = "15550000001"  # accepted, then no answer past our deadline
UNAVAILABLE = "15550000003"  # 503 twice per message, then accepted
RATE_LIMITED = "15550000004"  # 429 with Retry-After once per message, then accepted
UNDELIVERABLE = "15550000005"  # 400, 131026, every time: a dead letter to requeue

KILLED_AT_RANDOM = "SIGKILL at a random moment"
CUT_MID_TRANSACTION = "connection cut mid-transaction (server up)"
# The run's own connections (its progress readings) carry this name: never cut.
OBSERVER = "fault-run-observer"
KILLED_AIMED = "SIGKILL of a worker draining while a send was accepted, not answered"
KILLED_ANSWERED = "SIGKILL of a worker as the provider's answer reached it, before its record"


@dataclass(frozen=True)
class Plan:
    messages: int
    kills: int
    workers: int = 3
    hanging: int = 8  # messages to the timeout-after-accept recipient
    unavailable: int = 6
    rate_limited: int = 6
    undeliverable: int = 6
    requeues: int = 3  # of the undeliverable ones, once they are dead letters
    cut_share: float = 0.02  # of the sends, cut by their own client first, then retried
    cancels_in_intake: int = 10
    cancels_while_sending: int = 10
    campaign_rate: float = 40.0
    shard_rate: float = 250.0
    pause_seconds: float = 3.0
    # Seconds between two kills, drawn at random; the first once 2 % are finished. A kill
    # of the worker holding a drain stops that drain for its lease (16 s here), so kills
    # far apart make a long run of stalls one after another.
    kill_gap: tuple[float, float] = (0.3, 3.0)
    # From 60 %: the server up, one backend at a time terminated in the middle of a
    # transaction (the web's, a worker's, the sweeper's), a second or so apart.
    transaction_cuts: int = 5
    seed: int = 35

    def recipients(self) -> list[str]:
        magic = (
            [TIMEOUT_AFTER_ACCEPT] * self.hanging
            + [UNAVAILABLE] * self.unavailable
            + [RATE_LIMITED] * self.rate_limited
            + [UNDELIVERABLE] * self.undeliverable
        )
        people = [f"1555500{n:05d}" for n in range(self.messages - len(magic))]
        everyone = people + magic
        random.Random(self.seed).shuffle(everyone)
        return everyone


class Injector:
    """Fires the sending-phase faults as `tick(progress)` is called from the run's loop."""

    def __init__(
        self,
        plan: Plan,
        system: System,
        redis: Redis,
        drain_lease: float,
        gate: AnswerGate | None = None,
    ) -> None:
        self.plan = plan
        self.system = system
        self.redis = redis
        self.drain_lease = drain_lease
        self.chooser = random.Random(plan.seed + 2)
        self.kills_left = plan.kills
        self.next_kill: float | None = None
        # The kill that waits for a send in flight: an early one, before the Redis flush
        # empties the registry that says which worker holds a drain.
        self.aimed = min(2, plan.kills - 1)
        # The kill the gate makes, as an answer reaches its worker (`answer_gate.py`).
        self.gate = gate
        self.answered = self.aimed + 1 if plan.kills > 1 else -1
        self.aimed_since: float | None = None
        self.killed = 0
        self.stopped: tuple[int, float] | None = None  # (pid, when SIGCONT is due)
        self.stop_since: float | None = None
        self.happened: Counter[str] = Counter()
        self.hanging_ids: set[int] = set()
        self.cuts_left = plan.transaction_cuts
        self.next_cut = 0.0

    def live_pids(self) -> list[int]:
        """The workers the gate may kill: running, and not the stopped one."""
        stopped = self.stopped[0] if self.stopped else None
        return [w.pid for w in self.system.workers if w.poll() is None and w.pid != stopped]

    def tick(self, progress: float, db: Database) -> None:
        now = time.monotonic()
        if self.kills_left and progress >= 0.02 and now >= (self.next_kill or now):
            self._kill(db)
        if self.stopped is None and "SIGSTOP past the lease" not in self.happened:
            if progress >= 0.25:
                self._stop_one()
        elif self.stopped is not None and time.monotonic() >= self.stopped[1]:
            os.kill(self.stopped[0], signal.SIGCONT)
            self.happened["SIGCONT"] += 1
            self.stopped = None
        if progress >= 1 / 3 and not self.happened["Redis flushed"]:
            self.redis.flushdb()  # FLUSHDB: only the run's own database
            self.happened["Redis flushed"] += 1
        if progress >= 0.5 and not self.happened["PostgreSQL restarted while sending"]:
            down = self.system.cluster.restart("immediate")
            self.happened["PostgreSQL restarted while sending"] += 1
            self.happened[f"PostgreSQL down {down:.1f} s (restarted while sending)"] += 1
        if progress >= 0.6 and self.cuts_left and now >= self.next_cut:
            self._cut_a_transaction()

    def _cut_a_transaction(self) -> None:
        """Terminate one backend of the system's that is inside a transaction now."""
        try:
            with psycopg.connect(self.system.cluster.dsn, autocommit=True) as connection:
                cut = connection.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend' AND xact_start IS NOT NULL"
                    " AND application_name <> %s LIMIT 1",
                    (OBSERVER,),
                ).fetchone()
        except psycopg.OperationalError:
            return
        if cut is not None and cut[0]:
            self.cuts_left -= 1
            self.next_cut = time.monotonic() + self.chooser.uniform(0.5, 2.0)
            self.happened[CUT_MID_TRANSACTION] += 1

    def _kill(self, db: Database) -> None:
        index = None
        if self.killed == self.aimed:
            # The aimed kill: a worker draining while a send the sandbox accepted is not
            # yet answered (one shard: the one holding it), if one shows up within 20 s;
            # else an ordinary kill.
            self.aimed_since = self.aimed_since or time.monotonic()
            index = self._worker_mid_send(db)
            if index is None and time.monotonic() - self.aimed_since < 20:
                return
            if index is not None:
                self.happened[KILLED_AIMED] += 1
        if self.killed == self.answered and self.gate is not None:
            self.aimed_since = self.aimed_since or time.monotonic()
            if not self.gate.armed and self.gate.killed is None:
                self.gate.arm()
            # Up to 40 s: a drain stalled by an earlier kill waits out its lease first.
            if self.gate.killed is None and time.monotonic() - self.aimed_since < 40:
                return
            pid = self.gate.disarm()  # none: it found no answer in time, a random kill
            index = next((n for n, w in enumerate(self.system.workers) if w.pid == pid), None)
            if index is not None:
                self.happened[KILLED_ANSWERED] += 1
        if index is None:
            # Any worker but the stopped one (its SIGCONT is part of the fault).
            stopped = self.stopped[0] if self.stopped else None
            running = [n for n, w in enumerate(self.system.workers) if w.pid != stopped]
            index = self.chooser.choice(running)
            self.happened[KILLED_AT_RANDOM] += 1
        self.kills_left -= 1
        self.killed += 1
        self.aimed_since = None
        self.next_kill = time.monotonic() + self.chooser.uniform(*self.plan.kill_gap)
        victim = self.system.workers[index]
        if self.stopped is not None and victim.pid == self.stopped[0]:
            self.stopped = None  # killed while stopped: it needs no SIGCONT now
            self.happened["  (the stopped worker killed)"] += 1
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.system.replace_worker(index)

    def _worker_mid_send(self, db: Database) -> int | None:
        try:
            with db.transaction() as session:
                busy = session.scalar(
                    select(Message.id)
                    .where(
                        Message.id.in_(self.hanging_ids),
                        Message.status == "sending",
                        Message.lease_until > utcnow(),
                        Message.next_attempt_at.is_(None),
                    )
                    .limit(1)
                )
        except DBAPIError:
            return None
        if busy is None:
            return None
        # One drain per identity and lane and shard: one of the busy ones holds it.
        pids = self._draining_pids() - {self.stopped[0] if self.stopped else None}
        for index, worker in enumerate(self.system.workers):
            if worker.pid in pids:
                return index
        return None

    def _draining_pids(self) -> set[int]:
        pids = set()
        queue = Queue(queue_name(self.system.lane), connection=self.redis)
        for worker in Worker.all(queue=queue):
            job_id = worker.get_current_job_id()
            if not job_id or not worker.pid:
                continue
            try:
                job = Job.fetch(job_id, connection=self.redis)
            except Exception:
                continue
            if job.func_name.endswith(".drain"):
                pids.add(worker.pid)
        return pids

    def _stop_one(self) -> None:
        """SIGSTOP a worker busy on a drain (any, if none is seen busy in 10 s), until its
        drain's lease has run out: another worker takes the drain over meanwhile."""
        self.stop_since = self.stop_since or time.monotonic()
        pids = self._draining_pids()
        candidates = [w for w in self.system.workers if w.pid in pids and w.poll() is None]
        if not candidates and time.monotonic() - self.stop_since < 10:
            return
        victim = (candidates or self.system.workers)[0]
        victim.send_signal(signal.SIGSTOP)
        self.stopped = (victim.pid, time.monotonic() + self.drain_lease + 2)
        self.happened["SIGSTOP past the lease"] += 1
        if not candidates:
            self.happened["  (stopped with no drain seen)"] += 1

    def release(self) -> None:
        if self.stopped is not None:
            os.kill(self.stopped[0], signal.SIGCONT)
            self.stopped = None


class Operator(threading.Thread):
    """A person at the dashboard's API and CLI while the run goes on: cancels queued
    messages, pauses the identity and resumes it, requeues the dead letters."""

    def __init__(
        self, plan: Plan, system: System, client: Client, identity_id: int, db: Database
    ) -> None:
        super().__init__(daemon=True)
        self.plan, self.system, self.client, self.db = plan, system, client, db
        self.identity_id = identity_id
        self.progress = 0.0
        self.ids: list[int] = []
        self.undeliverable: list[int] = []
        self.asked_to_cancel: set[int] = set()
        self.requeued: list[int] = []
        self.happened: Counter[str] = Counter()
        self.errors: list[str] = []
        self.finished = threading.Event()
        self.stop = threading.Event()

    def cancel(self, ids: list[int], when: str) -> None:
        for message_id in ids:
            self.asked_to_cancel.add(message_id)
            outcome = "canceled" if self.client.cancel(message_id) else "too late (409)"
            self.happened[f"cancel {when}: {outcome}"] += 1

    def _wait(self, share: float) -> bool:
        while self.progress < share:
            if self.stop.wait(0.05):
                return False
        return True

    def _cli(self, what: str, *args: str) -> None:
        """Run a command until it succeeds (PostgreSQL may be restarting meanwhile)."""
        deadline = time.monotonic() + 60
        while True:
            done = self.system.cli(*args)
            if done.returncode == 0:
                self.happened[what] += 1
                return
            self.happened[f"  ({what} failed once and was typed again)"] += 1
            if time.monotonic() > deadline or self.stop.wait(0.5):
                self.errors.append(f"{what}: {done.stdout}{done.stderr}")
                return

    def run(self) -> None:
        try:
            chooser = random.Random(self.plan.seed + 3)
            if not self._wait(0.1):
                return
            live = [i for i in self.ids if i not in self.asked_to_cancel]
            self.cancel(chooser.sample(live, self.plan.cancels_while_sending), "while sending")
            if not self._wait(0.15):
                return
            identity = str(self.identity_id)
            self._cli("pause (CLI)", "identity", "pause", identity, "--reason", "fault run")
            if self.stop.wait(self.plan.pause_seconds):  # how long the person waits
                return
            self._cli("resume (CLI)", "identity", "resume", identity)
            if not self._wait(0.4):
                return
            for message_id in self._dead_letters()[: self.plan.requeues]:
                self._cli("requeue of a dead letter (CLI)", "message", "requeue", str(message_id))
                self.requeued.append(message_id)
        except Exception as exc:  # the run reports it; a thread's exception would vanish
            self.errors.append(repr(exc))
        finally:
            self.finished.set()

    def _dead_letters(self) -> list[int]:
        """The undeliverable messages once they have all failed (not canceled ones)."""
        while not self.stop.is_set():
            try:
                with self.db.transaction() as session:
                    rows = session.execute(
                        select(Message.id, Message.status, Message.failure_class).where(
                            Message.id.in_(self.undeliverable)
                        )
                    ).all()
                failed = [r.id for r in rows if r.status == "failed"]
                if len(failed) == len(rows):
                    return sorted(r.id for r in rows if r.failure_class == "permanent")
            except DBAPIError:
                pass
            self.stop.wait(0.2)
        return []
