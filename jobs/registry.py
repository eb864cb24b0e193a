"""The workers as RQ's own registry knows them, for the dashboard and the stuck alert.

A worker registers its birth in Redis (a hash under `rq:worker:<name>`, listed in the
per-queue set `rq:workers:<queue>`) and keeps that hash alive with heartbeats; RQ lets the
hash expire when the heartbeats stop, and a clean stop records its death and leaves the
sets. So "live" here means what RQ means: the hash still exists. A worker frozen mid-job
(stopped, swapping) stays listed until its hash expires; its heartbeat's age shows it.

Only reads. Times are the workers' own clocks (RQ stamps them), not the dashboard's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from redis import Redis
from redis.exceptions import RedisError
from rq import SimpleWorker
from rq.exceptions import NoSuchJobError
from rq.job import Job

from jobs.queues import LANES, QUEUE_PREFIX, get_queue


@dataclass(frozen=True, slots=True)
class Drain:
    """The drain a worker is running now: its identity and lane (the job's arguments)."""

    job_id: str
    identity_id: int | None
    lane: str | None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    name: str
    lanes: tuple[str, ...]
    hostname: str | None
    pid: int | None
    state: str
    current_job_id: str | None
    drain: Drain | None
    last_heartbeat: datetime | None
    started: datetime | None


def _lane_of(queue_name: str) -> str:
    prefix = f"{QUEUE_PREFIX}-"
    return queue_name[len(prefix) :] if queue_name.startswith(prefix) else queue_name


def _drain_of(redis: Redis, job_id: str | None) -> Drain | None:
    """What the current job works on: a drain's (identity_id, lane, token) arguments, or
    a send job's message id; an unreadable or finished job names no identity."""
    if job_id is None:
        return None
    try:
        job = Job.fetch(job_id, connection=redis)
        args = job.args
    except (NoSuchJobError, RedisError, ValueError, TypeError, AttributeError):
        return Drain(job_id, None, None)
    if (job.func_name or "").endswith(".drain") and len(args) >= 2 and isinstance(args[0], int):
        return Drain(job_id, args[0], str(args[1]))
    return Drain(job_id, None, None)


def list_workers(redis: Redis) -> list[WorkerInfo]:
    """Every live worker on a Ratchet lane, by lane then name. Raises RedisError when
    Redis cannot be reached (the caller says so rather than showing none)."""
    found: dict[str, WorkerInfo] = {}
    for lane in LANES:
        for worker in SimpleWorker.all(queue=get_queue(lane, redis)):
            if worker.name in found:
                continue
            job_id = worker.get_current_job_id()
            found[worker.name] = WorkerInfo(
                name=worker.name,
                lanes=tuple(_lane_of(name) for name in worker.queue_names()),
                hostname=worker.hostname,
                pid=worker.pid,
                state=worker.get_state(),
                current_job_id=job_id,
                drain=_drain_of(redis, job_id),
                last_heartbeat=worker.last_heartbeat,
                started=worker.birth_date,
            )
    return sorted(found.values(), key=lambda w: (w.lanes, w.name))


def live_by_lane(workers: list[WorkerInfo]) -> dict[str, int]:
    """How many live workers serve each lane (every lane present, 0 when none)."""
    counts = dict.fromkeys(LANES, 0)
    for worker in workers:
        for lane in worker.lanes:
            if lane in counts:
                counts[lane] += 1
    return counts


def read_live_by_lane(redis: Redis) -> Mapping[str, int] | None:
    """`live_by_lane` straight from Redis; None when Redis cannot be reached (unknown,
    which is not the same as none)."""
    try:
        return live_by_lane(list_workers(redis))
    except RedisError:
        return None
