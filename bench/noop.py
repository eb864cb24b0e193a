"""The baseline's job: nothing at all, so only RQ's own cost is measured; and the baseline
run of `bench/send_rate.py` that works it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.common import Processes

BASELINE_QUEUE = "bench-noop"


def noop() -> None:
    return None


def baseline(processes: Processes, jobs: int, workers: int) -> dict[str, Any]:
    from redis import Redis
    from rq import Queue
    from rq.job import Job
    from rq.registry import FinishedJobRegistry

    from bench.common import (
        REDIS_URL,
        BenchBroke,
        cpu_delta,
        cpu_snapshot,
        machine_ticks,
        process_env,
        self_cpu,
        wait_for,
    )

    redis = Redis.from_url(REDIS_URL)
    queue = Queue(BASELINE_QUEUE, connection=redis)
    queue.empty()
    enqueued = queue.enqueue_many([Queue.prepare_data(noop, result_ttl=3600) for _ in range(jobs)])
    ids = [job.id for job in enqueued]
    finished = FinishedJobRegistry(queue=queue)
    env = process_env()
    names = [f"rq{n}" for n in range(workers)]
    cpu_before = cpu_snapshot({})
    machine_before = machine_ticks()
    self_before = self_cpu()
    started = time.monotonic()
    for name in names:
        processes.start(
            name,
            [
                str(Path(sys.executable).parent / "rq"),
                "worker",
                "--burst",
                "--with-scheduler",
                "--worker-class",
                "rq.worker.SimpleWorker",
                "--url",
                REDIS_URL,
                BASELINE_QUEUE,
            ],
            env,
        )
    done = wait_for(lambda: finished.count >= jobs, limit=300, every=0.02, what="the no-op jobs")
    wall = done - started
    cpu = cpu_delta(
        cpu_before, cpu_snapshot({"rq workers": [processes.started[n].pid for n in names]})
    )
    machine_after = machine_ticks()
    self_spent = self_cpu() - self_before
    exited = wait_for(
        lambda: all(processes.started[n].poll() is not None for n in names),
        limit=60,
        what="the burst workers to exit",
    )
    codes = [processes.started[n].returncode for n in names]
    processes.stop(names)
    if any(codes):
        raise BenchBroke(f"an rq worker exited with {codes}; see {processes.logs}")
    starts, ends = [], []
    for job in Job.fetch_many(ids, connection=redis):
        if job is None or job.get_status() != "finished":
            raise BenchBroke("a no-op job did not finish")
        assert job.started_at is not None and job.ended_at is not None
        starts.append(job.started_at.timestamp())
        ends.append(job.ended_at.timestamp())
    steady = max(ends) - min(starts)
    queue.empty()
    finished.cleanup()
    redis.close()
    return {
        "wall": wall,
        "rate": jobs / wall,
        "steady": steady,
        "steady_rate": jobs / steady,
        "exit": exited - started,
        "cpu": cpu,
        "self_cpu": self_spent,
        "machine": (machine_before, machine_after),
    }
