"""Drains and pacing with real worker processes, real PostgreSQL and Redis, and the sandbox
over HTTP. Only upper bounds and orderings are asserted, by the sandbox's own receipt times:
never a duration."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import func, select

from app.models import Identity, Message
from app.repo.messages import NewMessage, create_message
from jobs.pacing import Pacer
from jobs.ringing import ring_identity

from ..conftest import PG_URL, SECRET_KEY
from .conftest import Env
from .drain_runs import BURST_SECONDS, burst_of, busiest_second
from .processes import start


class Cluster:
    """Worker processes of both lanes and a sweeper, started against the test's services."""

    def __init__(self, env: Env, logs: Path, **settings: str) -> None:
        self.env = env
        self.logs = logs
        self.process_env = {
            **os.environ,
            "DATABASE_URL": PG_URL,
            "REDIS_URL": env.config.redis_url,
            "SECRET_KEY": SECRET_KEY,
            "PUBLIC_BASE_URL": env.base_url,
            "RATCHET_PROVIDER_TIMEOUT": "3",
            "RATCHET_WEBHOOK_GRACE": "1",
            "RATCHET_SWEEP_INTERVAL": "0.5",
            "RATCHET_DRAIN_SLICE": "1",
            "RATCHET_PACING_BURST": str(BURST_SECONDS),
            **settings,
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, campaign: int = 3, reply: int = 1, sweeper: bool = True) -> None:
        for n in range(campaign):
            self._start(f"campaign{n}", ["worker", "--lane", "campaign"])
        for n in range(reply):
            self._start(f"reply{n}", ["worker", "--lane", "reply"])
        if sweeper:
            self._start("sweeper", ["sweep"])

    def _start(self, name: str, args: list[str]) -> None:
        self.processes[name] = start(name, args, self.process_env, self.logs)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for name in self.processes:
            log = (self.logs / f"{name}.log").read_text()
            assert "Traceback" not in log, f"{name}:\n{log[-3000:]}"


@pytest.fixture
def cluster(env: Env, tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(env, tmp_path)
    yield made
    made.stop()


def set_rates(env: Env, identity_id: int, reply: float, campaign: float, total: float) -> None:
    with env.db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None
        identity.reply_rate, identity.campaign_rate, identity.total_rate = reply, campaign, total


TAGS = {"": "0", "c": "1", "r": "2", "b": "3", "q": "4"}


def recipient(number: dict[str, Any], n: int, tag: str) -> str:
    """13 digits: the tag, the identity and the message's number."""
    return f"1555{TAGS[tag]}{number['identity_id'] % 1000:03d}{n:05d}"


def enqueue(
    env: Env, number: dict[str, Any], count: int, lane: str = "campaign", tag: str = ""
) -> list[int]:
    """`count` messages committed in one transaction, then one ring of their drain."""
    with env.db.transaction() as session:
        identity = session.get(Identity, number["identity_id"])
        assert identity is not None
        ids = []
        for n in range(count):
            message, _ = create_message(
                session,
                NewMessage(
                    tenant_id=identity.tenant_id,
                    identity_id=identity.id,
                    recipient=recipient(number, n, tag),
                    lane=lane,
                    fingerprint=f"{tag}{n}".ljust(64, "f"),
                    body_text=f"hello {n}",
                ),
                env.now,
            )
            ids.append(message.id)
    assert ring_identity(number["identity_id"], lane, env.config)
    return ids


def finished(env: Env, ids: list[int]) -> int:
    with env.db.transaction() as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(Message)
                .where(
                    Message.id.in_(ids),
                    Message.status.in_(["sent", "delivered", "read", "failed"]),
                )
            )
            or 0
        )


def wait_until(condition: Callable[[], bool], limit: float = 120.0, every: float = 0.2) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the system never got there"
        time.sleep(every)


def receipt_times(env: Env, number: dict[str, Any]) -> list[float]:
    return sorted(a["time"] for a in env.accepted(number))


@pytest.mark.slow
def test_no_one_second_window_exceeds_the_identitys_rate_plus_its_burst(
    env: Env, cluster: Cluster
) -> None:
    number = env.number(rate_limit_mps=None, statuses=[])
    set_rates(env, number["identity_id"], reply=5, campaign=20, total=25)
    ids = enqueue(env, number, 150)
    cluster.start(campaign=3, reply=0)
    wait_until(lambda: finished(env, ids) == len(ids))
    times = receipt_times(env, number)
    assert len(times) == len(ids)
    # The slots are granted on Redis's clock; these are arrival times at the sandbox, which
    # a loaded machine delays unevenly: a request held back 0.25 s lands in the next window
    # beside the on-time ones. So the window may hold the rate, the burst, and what 0.25 s
    # of that jitter carries over (0.1 s was once exceeded with the suite in two processes
    # on a busy machine: 26 in a second); unpaced, 150 messages would arrive within well
    # under a second, and a doubled rate would put 40 in one.
    jitter = math.ceil(20 * 0.25)
    assert busiest_second(times) <= 20 + burst_of(20) + jitter


@pytest.mark.slow
def test_a_second_identity_is_not_delayed_by_the_first_ones_backlog(
    env: Env, cluster: Cluster
) -> None:
    busy = env.number(rate_limit_mps=None, statuses=[])
    quiet = env.number(rate_limit_mps=None, statuses=[])
    set_rates(env, busy["identity_id"], reply=10, campaign=100, total=110)
    set_rates(env, quiet["identity_id"], reply=10, campaign=100, total=110)
    backlog = enqueue(env, busy, 2000, tag="b")
    mine = enqueue(env, quiet, 100, tag="q")
    cluster.start(campaign=3, reply=0)
    wait_until(lambda: finished(env, mine) == len(mine))
    quiet_last = receipt_times(env, quiet)[-1]
    busy_times = receipt_times(env, busy)
    done_before = sum(1 for t in busy_times if t <= quiet_last)
    assert done_before < len(backlog) // 4, (done_before, len(busy_times))


@pytest.mark.slow
def test_a_reply_behind_a_campaign_backlog_goes_before_the_next_50_campaign_messages(
    env: Env, cluster: Cluster
) -> None:
    number = env.number(rate_limit_mps=None, statuses=[])
    set_rates(env, number["identity_id"], reply=20, campaign=40, total=60)
    backlog = enqueue(env, number, 600, tag="c")
    cluster.start(campaign=3, reply=1)
    wait_until(lambda: finished(env, backlog) >= 50)
    asked = time.time()
    (reply,) = enqueue(env, number, 1, lane="reply", tag="r")
    wait_until(lambda: finished(env, [reply]) == 1, every=0.05)
    accepted = env.accepted(number)
    reply_to = recipient(number, 0, "r")
    (reply_at,) = [a["time"] for a in accepted if a["to"] == reply_to]
    campaign_between = sum(1 for a in accepted if asked <= a["time"] < reply_at)
    assert campaign_between < 50, campaign_between


@pytest.mark.slow
def test_a_lowered_rate_holds_in_the_windows_after_the_update(env: Env, cluster: Cluster) -> None:
    number = env.number(rate_limit_mps=None, statuses=[])
    set_rates(env, number["identity_id"], reply=5, campaign=40, total=45)
    ids = enqueue(env, number, 260)
    cluster.start(campaign=3, reply=0)
    wait_until(lambda: finished(env, ids) >= 80)
    result = env.app.test_cli_runner().invoke(
        args=["identity", "update", str(number["identity_id"]), "--campaign-rate", "10"]
    )
    assert result.exit_code == 0, result.output
    changed_at = time.time()
    wait_until(lambda: finished(env, ids) >= 160)
    times = receipt_times(env, number)
    # A drain already holding slots may finish them; from a second after the update on,
    # the new rate holds (the old one would allow 44 in a second).
    assert busiest_second(times, start=changed_at + 1.0) <= 10 + burst_of(10)


@pytest.mark.slow
def test_a_rate_limit_storm_slows_the_identity_and_it_recovers(env: Env, tmp_path: Path) -> None:
    cluster = Cluster(env, tmp_path, RATCHET_PACING_SLOWDOWN="2")
    number = env.number(rate_limit_mps=8, statuses=[])  # the provider allows 8/s; we are set to 30
    set_rates(env, number["identity_id"], reply=5, campaign=30, total=35)
    ids = enqueue(env, number, 200)
    watcher = Redis.from_url(env.config.redis_url)
    pacer = Pacer(watcher)
    slowest = 1.0
    try:
        cluster.start(campaign=3, reply=0)

        def watch() -> bool:
            nonlocal slowest
            slowest = min(slowest, pacer.slowdown(number["identity_id"]))
            return finished(env, ids) == len(ids)

        wait_until(watch, limit=180, every=0.1)
    finally:
        cluster.stop()
    assert slowest < 1.0  # the identity was slowed, visibly
    with env.db.transaction() as session:
        states = Counter(session.scalars(select(Message.status).where(Message.id.in_(ids))).all())
    assert states["failed"] == 0  # every rate-limited attempt was retried and went
    wait_until(lambda: pacer.slowdown(number["identity_id"]) == 1.0, limit=10)  # recovered
    watcher.close()
    per_message = Counter(a["to"] for a in env.accepted(number))
    assert max(per_message.values()) == 1


@pytest.mark.slow
def test_a_redis_flush_mid_drain_loses_nothing(env: Env, cluster: Cluster) -> None:
    number = env.number(rate_limit_mps=None, statuses=[])
    set_rates(env, number["identity_id"], reply=10, campaign=60, total=70)
    ids = enqueue(env, number, 300)
    cluster.start(campaign=3, reply=0)
    wait_until(lambda: finished(env, ids) >= 80)
    with Redis.from_url(env.config.redis_url) as redis:
        redis.flushdb()  # queues, drain keys, scheduled wakes
    wait_until(lambda: finished(env, ids) == len(ids))
    per_message = Counter(a["to"] for a in env.accepted(number))
    assert len(per_message) == len(ids) and max(per_message.values()) == 1
