"""Three hosts sending one identity (tests/jobs/test_hosts.py): the hosts up with the web
(`three_hosts`), a campaign posted through their webs (`post`), a campaign worker on each
and the sweeper on the first (`HostRun.start_workers`), and what the database and the
sandbox say of it: each message's claims (`claims_of`), the most sends the sandbox
accepted in one second (`most_in_a_second`), the shards a host's worker is draining
(`draining`).
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from redis import Redis
from rq import Worker
from rq.job import Job
from sqlalchemy import select, update

from app.models import Attempt, Identity, MessageEvent

from ..chaos.checker import Acknowledged
from ..chaos.hosts import Host, Network, hosts
from ..conftest import PG_URL
from .conftest import Env
from .processes import worker_env
from .shard_switch import shard_on

LANE = "campaign"
RATE = 30.0  # the identity's campaign rate, per second
SHARD_RATE = 10.0  # so three shards: every host's worker can drain one
ANSWER_MS = 400  # each send is in flight this long, so a cut always finds some
SETTINGS = {
    "RATCHET_PROVIDER_TIMEOUT": "3",
    "RATCHET_WEBHOOK_GRACE": "2",
    "RATCHET_SWEEP_INTERVAL": "0.5",
}


@dataclass
class HostRun:
    env: Env
    network: Network
    number: dict[str, Any]
    redis: Redis
    settings: dict[str, str]  # a worker's environment, before a host's own

    def start_workers(self) -> list[subprocess.Popen]:
        """A campaign worker on each host (returned, in the hosts' order) and the sweeper on
        the first; once all three workers are up (the drains the posts rang wait for them)."""
        workers = [
            host.start("worker", ["worker", "--lane", LANE], host.environ(self.settings))
            for host in self.network
        ]
        self.network[0].start("sweeper", ["sweep"], self.network[0].environ(self.settings))
        self.wait_for("three workers", lambda: len(workers_of(self.redis)) == 3, limit=60)
        return workers

    def wait_for(self, what: str, ready: Callable[[], bool], limit: float = 90.0) -> None:
        deadline = time.monotonic() + limit
        while not ready():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)


@contextlib.contextmanager
def three_hosts(env: Env, logs: Any, skews: dict[int, str] | None = None) -> Iterator[HostRun]:
    """Three hosts, each with the web up (`HostRun.start_workers` adds a campaign worker on
    each and the sweeper), and one identity whose three shards any of them may drain;
    `skews` sets hosts' clocks."""
    shard_on(env, shard_rate=SHARD_RATE)
    with hosts(
        3, logs=logs, pg_url=PG_URL, redis_url=env.config.redis_url, sandbox_url=env.sandbox_url
    ) as network:
        for index, skew in (skews or {}).items():
            network[index].skew = skew
        number = env.number(
            honour_idempotency_keys=True,
            statuses=[],  # no webhooks: an answer lost in a cut is an unknown outcome
            answer_delay_ms=ANSWER_MS,
            rate_limit_mps=None,
            webhook_url=f"{network[0].web_url}/webhooks/whatsapp",
        )
        env.set_rates(number, reply_rate=5.0, campaign_rate=RATE, total_rate=RATE + 5.0)
        with env.db.transaction() as session:  # the sandbox as the hosts reach it
            session.execute(
                update(Identity)
                .where(Identity.id == number["identity_id"])
                .values(base_url=f"{network.sandbox_url}/v21.0")
            )
        base = worker_env(env, **SETTINGS)
        for host in network:
            host.serve(host.environ(base))
        redis = Redis.from_url(env.config.redis_url)
        try:
            run = HostRun(env, network, number, redis, base)
            for host in network:
                host.answering()
            yield run
        finally:
            redis.close()


def post(run: HostRun, recipients: list[str]) -> list[Acknowledged]:
    """Each message posted through the next host's web, four at a time, under a key of its
    own, and posted again under that key if the connection broke before the answer (a
    keep-alive connection the web closed as the request went out)."""
    webs = itertools.cycle([host.web_url for host in run.network])
    targets = [(next(webs), to, uuid.uuid4().hex) for to in recipients]
    headers = {"Authorization": f"Bearer {run.number['api_key']}"}

    with httpx.Client(timeout=30, headers=headers) as client:

        def one(target: tuple[str, str, str]) -> Acknowledged:
            web, to, key = target
            body = {"identity_id": run.number["identity_id"], "to": to, "text": "hello"}
            asked = time.time()
            for tries in itertools.count(1):
                try:
                    response = client.post(
                        f"{web}/v1/messages", json=body, headers={"Idempotency-Key": key}
                    )
                    break
                except httpx.TransportError:
                    if tries == 3:
                        raise
            assert response.status_code in (200, 201), response.text
            return Acknowledged(int(response.json()["id"]), to, time.time(), asked_at=asked)

        with ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(one, targets))


def workers_of(redis: Redis) -> list[Any]:
    return [worker for worker in Worker.all(connection=redis) if worker.pid]


def draining(run: HostRun, host: Host) -> set[int]:
    """The shards the host's workers are draining now (their current jobs' arguments)."""
    pids = {process.pid for process in host.processes}
    shards = set()
    for worker in workers_of(run.redis):
        job_id = worker.get_current_job_id() if worker.pid in pids else None
        job = Job.fetch(job_id, connection=run.redis) if job_id else None
        if job is not None and job.args[0] == run.number["identity_id"]:
            shards.add(job.args[3] if len(job.args) > 3 else 0)
    return shards


@dataclass(frozen=True)
class Claim:
    at: datetime  # on the database's clock
    attempt: int
    lease_lost: bool


def claims_of(env: Env, ids: list[int]) -> dict[int, list[Claim]]:
    """Each message's claims, in order."""
    with env.db.transaction() as session:
        rows = session.execute(
            select(MessageEvent.message_id, MessageEvent.received_at, MessageEvent.detail)
            .where(MessageEvent.message_id.in_(ids), MessageEvent.kind == "claim")
            .order_by(MessageEvent.id)
        ).all()
    claims: dict[int, list[Claim]] = defaultdict(list)
    for row in rows:
        detail = row.detail or {}
        claims[row.message_id].append(
            Claim(row.received_at, int(detail["attempt"]), bool(detail.get("lease_lost")))
        )
    return claims


def most_in_a_second(times: list[float]) -> int:
    """The most of `times` in any window of one second."""
    ordered = sorted(times)
    most, start = 0, 0
    for end, at in enumerate(ordered):
        while ordered[start] <= at - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def requests_of(env: Env, number: dict, ids: list[int]) -> dict[int, list[float]]:
    """Each message's requests at the sandbox (by its provider key), their arrival times
    in order; a message never requested is absent."""
    with env.db.transaction() as session:
        keys = dict(
            session.execute(
                select(Attempt.provider_key, Attempt.message_id).where(Attempt.message_id.in_(ids))
            ).all()
        )
    times: dict[int, list[float]] = defaultdict(list)
    for request in env.requests(number):
        message_id = keys.get(str(request.get("idempotency_key")))
        if message_id is not None:
            times[message_id].append(request["time"])
    return {message_id: sorted(at) for message_id, at in times.items()}
