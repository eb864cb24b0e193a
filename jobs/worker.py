"""The RQ worker of one lane.

Non-forking (`SimpleWorker`): each job runs in the worker process itself. RQ's default
worker forks once per job, which on this class of machine caps it near 33 jobs/s (against
about 140 without the fork), and the child would inherit the parent's SQLAlchemy pool.
A job that hangs cannot stall it for long: every provider call has a total deadline shorter
than the message's lease, and a job that dies is re-rung by the sweeper.
"""

from __future__ import annotations

import logging
import resource

from rq import SimpleWorker

from app.startup import freeze_startup_objects
from jobs.callbacks import callback_queue
from jobs.queues import get_queue, get_redis
from jobs.tails import TAILS

log = logging.getLogger(__name__)

# The soft limit of open files a worker asks for when its hard limit is unlimited.
OPEN_FILES = 65536


def raise_open_files() -> int:
    """Raise this process's soft limit of open files to its hard limit, and return it. A
    worker keeps a socket for each provider call in flight, up to twice
    `RATCHET_DRAIN_CONCURRENCY` (a drain's and its tail's, `jobs/tails.py`), beside its
    database, Redis and log files; a soft limit of 1024, a common default, would refuse
    connections past it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:
            log.warning("open files stay limited to %d: %s", soft, exc)
    return soft


def run_worker(lane: str, *, burst: bool = False) -> bool:
    """Work the lane's queue until SIGTERM (or, with `burst`, until it is empty). The lane
    `callbacks` is the status callbacks' queue (`jobs/callbacks.py`)."""
    queue = callback_queue() if lane == "callbacks" else get_queue(lane)
    worker = SimpleWorker([queue], connection=get_redis())
    freeze_startup_objects()  # a full collection's pause stalls every reply in flight
    raise_open_files()
    # The scheduler moves retries rung for a later time (`enqueue_at`) onto the queue.
    # RQ's own per-job lines at WARNING: the log a person reads is the drains' one line
    # per send outcome (message, attempt, identity, lane, what happened).
    try:
        return bool(worker.work(burst=burst, with_scheduler=True, logging_level="WARNING"))
    finally:
        TAILS.wait()  # the last drain's calls, if it handed them over (`jobs/tails.py`)
