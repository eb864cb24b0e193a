"""The fault run at scale (`make chaos`; not part of `make test`): 10,000 messages through
the public API to three campaign workers and the sweeper, while workers are SIGKILLed at
random moments and restarted (20 kills) and Redis is flushed once; the sandbox accepts
some sends and then hangs past our deadline. The checker's one line says what came of it
(`tests/chaos/checker.py`), and it must be clean.

    make chaos                                   # 10,000 messages, 20 kills
    RATCHET_CHAOS_MESSAGES=2000 RATCHET_CHAOS_KILLS=5 make chaos
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from redis import Redis

from ..chaos.checker import Acknowledged
from .conftest import Env
from .outcomes import finished, verdict_of
from .processes import start, stop_all, worker_env
from .shard_switch import shard_on

MESSAGES = int(os.environ.get("RATCHET_CHAOS_MESSAGES", "10000"))
KILLS = int(os.environ.get("RATCHET_CHAOS_KILLS", "20"))
HANG_RECIPIENT = "15550000001"  # the sandbox accepts, then answers after hang_seconds
HANGING = 20  # one recipient's messages go one at a time: a few keep the run short


@pytest.mark.chaos
@pytest.mark.timeout(1800)  # posting 10,000 through the API alone takes about 4 minutes
def test_ten_thousand_messages_through_kills_and_a_redis_flush_read_clean(
    env: Env, tmp_path: Path
) -> None:
    shard_on(env, shard_rate=250.0)  # four shards: every worker can send this number
    number = env.number(honour_idempotency_keys=True, hang_seconds=4)
    env.set_rates(number, reply_rate=10.0, campaign_rate=1000.0, total_rate=1010.0)
    settings = worker_env(
        env,
        RATCHET_PROVIDER_TIMEOUT="3",
        RATCHET_WEBHOOK_GRACE="2",
        RATCHET_SWEEP_INTERVAL="0.5",
    )
    lane = ["worker", "--lane", "campaign"]
    every: list[subprocess.Popen] = []
    redis = Redis.from_url(env.config.redis_url)
    chooser = random.Random(MESSAGES)  # the same moments for the same size
    kills = 0
    flushed = False
    started = time.monotonic()
    try:
        people = [f"1555400{n:05d}" for n in range(MESSAGES - HANGING)]
        recipients = people + [HANG_RECIPIENT] * HANGING
        chooser.shuffle(recipients)

        def post(to: str) -> Acknowledged:
            asked = time.time()
            message_id = env.send(number, to)
            return Acknowledged(message_id, to, time.time(), asked_at=asked)

        with ThreadPoolExecutor(max_workers=4) as pool:
            acks = list(pool.map(post, recipients))
        ids = [ack.message_id for ack in acks]
        print(f"\nposted {len(ids)} in {time.monotonic() - started:.0f} s")
        # The workers start on the whole backlog, so every fault lands mid-run.
        started = time.monotonic()
        workers = [start(f"worker{n}", lane, settings, tmp_path) for n in range(3)]
        every += [*workers, start("sweeper", ["sweep"], settings, tmp_path)]

        pause = threading.Event()
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline:
            done = finished(env, ids)
            if done == len(ids):
                break
            if kills < KILLS:
                victim = chooser.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait()
                kills += 1
                workers[victim] = start(f"worker{victim}-{kills}", lane, settings, tmp_path)
                every.append(workers[victim])
            if not flushed and done >= len(ids) // 3:
                redis.flushdb()  # queues, scheduled rings, the worker registry
                flushed = True
            pause.wait(chooser.uniform(0.2, 1.0))  # a random moment for the next kill
        elapsed = time.monotonic() - started
    finally:
        redis.close()
        stop_all(every)

    verdict = verdict_of(env, number, "whatsapp", acks)
    print(f"{verdict.line()} ({kills} kills, redis flushed: {flushed}, {elapsed:.0f} s)")
    assert kills == KILLS and flushed, "the messages were all sent before every fault"
    assert verdict.clean and not verdict.dead_letters, verdict.line()
