"""Processes whose wall clocks disagree by a minute (issue 35): real workers, a sweeper and
the CLI, each under libfaketime 30 s ahead or 30 s behind, against one PostgreSQL. Every
time they compare is on the database's clock (`app/clock.py`), so none of them takes over
a live lease or lets a stale broken-sender answer pause an identity an operator resumed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue, Worker
from rq.job import Job, JobStatus
from sqlalchemy import select

from app.clock import utcnow
from app.models import Identity, MessageEvent
from app.repo.identities import pause_identity
from jobs.queues import drain_keys, queue_name
from jobs.ringing import ring_identity

from ..faketime import require_faketime, skewed
from .conftest import Env
from .processes import start, stop_all, worker_env

ROOT = Path(__file__).resolve().parents[2]
FLASK = [sys.executable, "-m", "flask", "--app", "wsgi"]
LANE = "campaign"
AHEAD, BEHIND = "+30s", "-30s"
# A call answered after ANSWER_S, inside a deadline of DEADLINE_S: the lease is then
# 2 x 12 + 5 = 29 s, shorter than the minute between the two clocks.
ANSWER_MS = 10_000
DEADLINE_S = "12"


def wait_for(what: str, ready: Callable[[], bool], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def drain_jobs(redis: Redis) -> list[Job]:
    """The lane's drain jobs RQ has finished."""
    queue = Queue(queue_name(LANE), connection=redis)
    ids = queue.finished_job_registry.get_job_ids()
    return [job for job in Job.fetch_many(ids, connection=redis) if job is not None]


def answered(env: Env, message_id: int) -> list[str]:
    """What the message's broken-sender answers did: held it (and paused the identity), or
    were found stale."""
    with env.db.transaction() as session:
        kinds = session.scalars(
            select(MessageEvent.kind).where(
                MessageEvent.message_id == message_id,
                MessageEvent.kind.in_(["held", "stale_sender_broken"]),
            )
        )
        return list(kinds)


def busy_job_ids(redis: Redis) -> set[str]:
    queue = Queue(queue_name(LANE), connection=redis)
    return {
        job_id
        for worker in Worker.all(queue=queue)
        if (job_id := worker.get_current_job_id()) is not None
    }


@pytest.mark.slow
def test_a_worker_30_s_ahead_does_not_take_over_the_lease_of_one_30_s_behind(
    env: Env, tmp_path: Path
) -> None:
    require_faketime()
    number = env.number(statuses=[], answer_delay_ms=ANSWER_MS)
    identity_id = number["identity_id"]
    settings = {"RATCHET_PROVIDER_TIMEOUT": DEADLINE_S, "RATCHET_SWEEP_INTERVAL": "0.5"}
    base = worker_env(env, **settings)
    redis = Redis.from_url(env.config.redis_url)
    behind = start("behind", ["worker", "--lane", LANE], skewed(base, BEHIND), tmp_path)
    processes = [behind]
    try:
        # 1. The worker behind claims the message; its call waits at the provider.
        message_id = env.send(number, "15550123001", lane=LANE)
        wait_for("the call to reach the provider", lambda: len(env.requests(number)) == 1)
        held_by = busy_job_ids(redis)
        # 2. The other worker and the sweeper, both ahead, come up while it waits.
        processes += [
            start("ahead", ["worker", "--lane", LANE], skewed(base, AHEAD), tmp_path),
            start("sweeper", ["sweep"], skewed(base, AHEAD), tmp_path),
        ]
        queue = Queue(queue_name(LANE), connection=redis)
        wait_for("the second worker", lambda: len(Worker.all(queue=queue)) == 2)
        # 3. Redis loses the drain's key (a flush, a failover), and the lane is rung: the
        #    worker ahead, the only one free, drains it while the call is still in flight.
        redis.delete(*drain_keys(identity_id, LANE))
        assert ring_identity(identity_id, LANE, env.config)

        def looked() -> bool:
            return any(
                job.id not in held_by and job.get_status() == JobStatus.FINISHED
                for job in drain_jobs(redis)
            )

        wait_for("the worker ahead to drain the lane", looked)
        assert env.message(message_id).status == "sending", "the call ended before the look"
        wait_for("the answer to be recorded", lambda: env.message(message_id).status != "sending")
    finally:
        redis.close()
        stop_all(processes)

    # One call and one attempt: the lease was not taken over before it really ended. (A
    # takeover shows as a second attempt counting the first as a lost, unknown outcome; it
    # waits the webhook grace before it calls, so the provider may not have seen it yet.)
    assert len(env.requests(number)) == 1
    row = env.message(message_id)
    assert (row.status, row.attempt, row.unknown_attempts) == ("sent", 1, 0)
    for name in ("behind", "ahead", "sweeper"):
        assert "Traceback" not in (tmp_path / f"{name}.log").read_text(), name


@pytest.mark.slow
def test_a_stale_broken_sender_answer_does_not_pause_an_identity_resumed_on_a_clock_behind(
    env: Env, tmp_path: Path
) -> None:
    require_faketime()
    # Ratchet holds a token the provider refuses (190) until it is fixed on Meta's side.
    number = env.number(token="refused-token", statuses=[], answer_delay_ms=6_000)
    identity_id = number["identity_id"]
    base = worker_env(env, RATCHET_PROVIDER_TIMEOUT="8")
    worker = start("ahead", ["worker", "--lane", LANE], skewed(base, AHEAD), tmp_path)
    try:
        # 1. The worker ahead claims the message; the refusal is on its way back.
        message_id = env.send(number, "15550123002", lane=LANE)
        wait_for("the call to reach the provider", lambda: len(env.requests(number)) == 1)
        # 2. Meanwhile another answer paused the identity, the operator got the token
        #    accepted at the provider, and resumed it from a machine 30 s behind.
        with env.db.transaction() as session:
            assert pause_identity(session, identity_id, "code 190 on another message", utcnow())
        env.sandbox(
            "PATCH", f"/numbers/{number['phone_number_id']}", json={"token": "refused-token"}
        )
        resume = subprocess.run(
            [
                sys.executable,
                "-m",
                "flask",
                "--app",
                "wsgi",
                "identity",
                "resume",
                str(identity_id),
            ],
            cwd=ROOT,
            env=skewed(base, BEHIND),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert resume.returncode == 0, resume.stdout + resume.stderr
        assert env.message(message_id).status == "sending", "the answer came before the resume"
        # 3. The old refusal arrives: stale, it pauses nothing; the message goes out again.
        wait_for("the refusal to be recorded", lambda: bool(answered(env, message_id)))
        assert answered(env, message_id) == ["stale_sender_broken"]
        wait_for("the message to be sent", lambda: env.message(message_id).status == "sent")
    finally:
        stop_all([worker])

    with env.db.transaction() as session:
        identity = session.get(Identity, identity_id, populate_existing=True)
        assert identity is not None and identity.paused_at is None
        kinds = session.scalars(
            select(MessageEvent.kind).where(MessageEvent.message_id == message_id)
        ).all()
    assert "stale_sender_broken" in kinds and "held" not in kinds
    assert [request["error_code"] for request in env.requests(number)] == [190, None]
    assert "Traceback" not in (tmp_path / "ahead.log").read_text()
