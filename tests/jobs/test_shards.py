"""One number across many workers (issue 30, item 2): an identity's lane split into shards
by a stable hash of the recipient, each shard drained by its own job, so several drains
and worker processes send one number's messages, each conversation in order, all inside
the lane's one pacing budget. Read at the sandbox (what it accepted, in what order, when)
and in the database; the workers are real processes where processes are the subject."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import signal
import threading
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker, Worker
from rq.job import Job
from sqlalchemy import select

from app.clock import utcnow
from app.models import Message
from app.shards import shard_key_of, shard_of
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys, queue_name
from jobs.sweep import sweep_once

from ..chaos.checker import Acknowledged
from .conftest import Env
from .outcomes import correlation_of, finished, verdict_of
from .processes import start, stop_all, worker_env
from .shard_switch import shard_on

LANE = "campaign"


def shard_of_recipient(recipient: str, count: int) -> int:
    return shard_of(shard_key_of(recipient), count)


def by_person(accepted: list[dict[str, Any]]) -> dict[str, list[str]]:
    texts: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for send in accepted:
        texts[send["to"]].append((send["time"], send["body"]["text"]["body"]))
    return {to: [text for _, text in sorted(sends)] for to, sends in texts.items()}


def post_conversations(
    env: Env, number: dict[str, Any], people: list[str], parts: int
) -> list[int]:
    """Round-robin, so every claim would hold several of one person's messages."""
    return [
        env.send(number, person, lane=LANE, text=f"part {part}")
        for part in range(parts)
        for person in people
    ]


def acknowledged_conversations(
    env: Env, number: dict[str, Any], people: list[str], parts: int
) -> list[Acknowledged]:
    """As `post_conversations`, with when each was asked for and answered (the checker's)."""
    acks = []
    for part in range(parts):
        for person in people:
            asked = time.time()
            message_id = env.send(number, person, lane=LANE, text=f"part {part}")
            acks.append(Acknowledged(message_id, person, time.time(), asked_at=asked))
    return acks


def test_each_message_is_stored_with_its_recipients_shard_key(env: Env) -> None:
    number = env.number(statuses=[])
    people = [f"1555880{n:04d}" for n in range(20)]
    ids = [env.send(number, person, lane=LANE) for person in people]
    with env.db.transaction() as session:
        keys = dict(
            session.execute(select(Message.id, Message.shard_key).where(Message.id.in_(ids))).all()
        )
    assert [keys[i] for i in ids] == [shard_key_of(person) for person in people]


def test_two_drains_of_one_identity_send_its_shards_side_by_side_each_conversation_in_order(
    env: Env,
) -> None:
    shard_on(env, shard_rate=250.0)
    number = env.number(statuses=[], rate_limit_mps=None, answer_delay_ms=50)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)  # two shards
    people = [f"155588{n:05d}" for n in range(16)]
    assert {shard_of_recipient(p, 2) for p in people} == {0, 1}
    ids = post_conversations(env, number, people, parts=4)
    redis = env.app.extensions["ratchet.redis"]
    Queue(queue_name(LANE), connection=redis).empty()  # the drains the API rang run here
    config = replace(env.config, drain_concurrency=10, drain_slice=60.0)
    sent: dict[int, Counter[str]] = {}

    def run(shard: int) -> None:
        token = f"shard{shard}"
        redis.set(drain_keys(identity_id, LANE, shard=shard)[0], token, px=60_000)
        pacer = Pacer(redis, config.pacing_burst, config.pacing_slowdown, config.pair_limit_wait)
        drain = Drain(env.db, env.box, config, redis, pacer, identity_id, LANE, shard=shard)
        with env.app.app_context():
            drain.run(token)
        sent[shard] = drain.outcomes

    threads = [threading.Thread(target=run, args=(shard,)) for shard in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    accepted = env.accepted(number)
    assert sorted(Counter(a["to"] for a in accepted).values()) == [4] * len(people)
    for person, texts in by_person(accepted).items():
        assert texts == [f"part {n}" for n in range(4)], person
    # Each drain sent exactly its own shard's messages.
    for shard in (0, 1):
        mine = sum(4 for p in people if shard_of_recipient(p, 2) == shard)
        assert sent[shard]["accepted"] == mine, (shard, sent[shard])
    assert [env.message(i).status for i in ids] == ["sent"] * len(ids)


def test_two_drains_of_one_identity_share_its_one_pacing_budget(env: Env) -> None:
    """Never above rate + burst in any second, and no faster than the rate over the run:
    bounds the pacing's arithmetic gives (a slow machine only sends slower)."""
    shard_on(env, shard_rate=20.0)
    rate = 40.0
    number = env.number(statuses=[], rate_limit_mps=None)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=rate, total_rate=rate)  # two shards of 20/s
    total = 120
    for n in range(total):
        env.send(number, f"155589{n:05d}", lane=LANE)
    redis = env.app.extensions["ratchet.redis"]
    # The drains the API rang are run here instead (a queued one would make these hand
    # their worker back at a pacing wait, `others_waiting`).
    Queue(queue_name(LANE), connection=redis).empty()
    config = replace(env.config, drain_slice=60.0)

    def run(shard: int) -> None:
        token = f"paced{shard}"
        redis.set(drain_keys(identity_id, LANE, shard=shard)[0], token, px=60_000)
        pacer = Pacer(redis, config.pacing_burst, config.pacing_slowdown, config.pair_limit_wait)
        with env.app.app_context():
            Drain(env.db, env.box, config, redis, pacer, identity_id, LANE, shard=shard).run(token)

    threads = [threading.Thread(target=run, args=(shard,)) for shard in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    times = sorted(send["time"] for send in env.accepted(number))
    assert len(times) == total
    burst = rate * config.pacing_burst
    most_in_a_second = max(
        sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times)
    )
    # Arrival times at the sandbox: a loaded machine holds some requests back up to 0.25 s
    # into the next window beside the on-time ones (47 to 51 were seen here, with 45 the
    # bound without jitter). Two shards each paced at the whole rate would put 80 in one.
    jitter = math.ceil(rate * 0.25)
    assert most_in_a_second <= rate + burst + 1 + jitter, most_in_a_second
    # n sends past the burst take at least (n - burst - 1) / rate on the bucket's clock; the
    # first arrival can be held back by the same jitter, shortening the span by as much.
    least = 0.98 * (total - burst - 1) / rate - 0.25
    assert times[-1] - times[0] >= least, times[-1] - times[0]


def test_after_a_redis_flush_the_sweeper_rings_every_shard_with_messages_due(env: Env) -> None:
    shard_on(env, shard_rate=100.0)
    number = env.number(statuses=[], rate_limit_mps=None)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=400.0, total_rate=400.0)  # four shards
    people = [f"155590{n:05d}" for n in range(24)]
    ids = [env.send(number, person, lane=LANE) for person in people]
    shards = {shard_of_recipient(p, 4) for p in people}
    assert shards == {0, 1, 2, 3}
    redis = Redis.from_url(env.config.redis_url)
    queue = Queue(queue_name(LANE), connection=redis)
    # The API rang each message's own shard: one drain pending per shard.
    assert all(redis.exists(drain_keys(identity_id, LANE, s)[0]) for s in shards)
    assert queue.count == len(shards)
    redis.flushdb()  # FLUSHDB of Ratchet's database only
    assert queue.count == 0

    sweep_once(env.db, env.config, utcnow())

    assert all(redis.exists(drain_keys(identity_id, LANE, s)[0]) for s in shards)
    rung = sorted(job.args[3] if len(job.args) > 3 else 0 for job in queue.get_jobs())
    assert rung == sorted(shards)
    SimpleWorker([queue], connection=redis).work(burst=True, with_scheduler=False)
    redis.close()
    assert [env.message(i).status for i in ids] == ["sent"] * len(ids)
    assert sorted(a["to"] for a in env.accepted(number)) == sorted(people)


def wait_until_finished(env: Env, ids: list[int], limit: float = 120.0) -> int:
    """Block until every message is terminal or advanced (or `limit` passes): each look
    waits on the database's own notion of progress, a quarter second apart at most."""
    done = threading.Event()
    deadline = utcnow().timestamp() + limit
    while not done.wait(0.25):
        if finished(env, ids) == len(ids) or utcnow().timestamp() > deadline:
            done.set()
    return finished(env, ids)


def sent_by(log: Path, identity_id: int) -> set[int]:
    """The messages of this identity a worker's drains sent (one log line per outcome)."""
    pattern = re.compile(rf"message (\d+) attempt \d+ \(identity {identity_id}, {LANE}\): accepted")
    return {int(found) for found in pattern.findall(log.read_text())}


def test_two_worker_processes_send_one_numbers_shards_each_conversation_in_order(
    env: Env, tmp_path: Path
) -> None:
    shard_on(env, shard_rate=100.0)
    number = env.number(statuses=[], rate_limit_mps=None, answer_delay_ms=100)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=400.0, total_rate=400.0)  # four shards
    people = [f"155591{n:05d}" for n in range(20)]
    processes = [
        start(f"worker{n}", ["worker", "--lane", LANE], worker_env(env), tmp_path) for n in range(2)
    ]
    try:
        ids = post_conversations(env, number, people, parts=5)
        assert wait_until_finished(env, ids) == len(ids)
    finally:
        stop_all(processes)
    accepted = env.accepted(number)
    assert len(accepted) == len(ids)  # each once
    for person, texts in by_person(accepted).items():
        assert texts == [f"part {n}" for n in range(5)], person
    # Both processes sent this one number's messages, each message from one of them.
    sent = [sent_by(tmp_path / f"worker{n}.log", identity_id) for n in range(2)]
    assert sent[0] and sent[1] and not sent[0] & sent[1]
    assert sent[0] | sent[1] == set(ids)
    for n in range(2):
        assert "Traceback" not in (tmp_path / f"worker{n}.log").read_text()


def kill_the_worker_draining(redis: Redis, identity_id: int) -> int | None:
    """SIGKILL a worker running a drain of this identity's lane now; its shard."""
    queue = Queue(queue_name(LANE), connection=redis)
    for worker in Worker.all(queue=queue):
        job_id = worker.get_current_job_id()
        if not job_id or not worker.pid:
            continue
        with contextlib.suppress(Exception):
            job = Job.fetch(job_id, connection=redis)
            if job.func_name.endswith(".drain") and job.args[0] == identity_id:
                os.kill(worker.pid, signal.SIGKILL)
                return int(job.args[3]) if len(job.args) > 3 else 0
    return None


def test_a_worker_killed_holding_a_shard_loses_and_duplicates_nothing(
    env: Env, tmp_path: Path
) -> None:
    shard_on(env, shard_rate=200.0)
    # Every call in flight for a while; the sandbox honours our keys, as WhatsApp's
    # on-premises API did, so a resend after the lost lease is counted, not doubled.
    number = env.number(
        statuses=[], rate_limit_mps=None, answer_delay_ms=300, honour_idempotency_keys=True
    )
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=400.0, total_rate=400.0)  # two shards
    people = [f"155592{n:05d}" for n in range(30)]
    settings = {
        "RATCHET_PROVIDER_TIMEOUT": "1",
        "RATCHET_WEBHOOK_GRACE": "1",
        "RATCHET_DRAIN_SLICE": "1",
        "RATCHET_SWEEP_INTERVAL": "0.5",
    }
    processes = [
        start(f"worker{n}", ["worker", "--lane", LANE], worker_env(env, **settings), tmp_path)
        for n in range(2)
    ]
    processes.append(start("sweeper", ["sweep"], worker_env(env, **settings), tmp_path))
    redis = Redis.from_url(env.config.redis_url)
    killed: int | None = None
    try:
        acks = acknowledged_conversations(env, number, people, parts=4)
        ids = [ack.message_id for ack in acks]
        looked = threading.Event()
        for _ in itertools.count():
            killed = kill_the_worker_draining(redis, identity_id)
            if killed is not None or finished(env, ids) == len(ids) or looked.wait(0.01):
                break
        assert killed is not None, "no drain of the identity was seen running"
        assert wait_until_finished(env, ids) == len(ids)
        # Read before the stop: the killed worker died of SIGKILL, the other carried on.
        # (How long a worker takes to stop on SIGTERM is not this test's subject.)
        ended = sorted(p.poll() or 0 for p in processes[:2])
    finally:
        redis.close()
        stop_all(processes)

    with env.db.transaction() as session:
        correlation = dict(
            session.execute(
                select(Message.correlation_id, Message.id).where(Message.id.in_(ids))
            ).all()
        )
    accepted = env.accepted(number)
    per_message = Counter(correlation.get(correlation_of("whatsapp", a)) for a in accepted)
    assert set(per_message) == set(ids) and set(per_message.values()) == {1}
    for person, texts in by_person(accepted).items():
        assert texts == [f"part {n}" for n in range(4)], person
    assert ended == [-signal.SIGKILL, 0]
    verdict = verdict_of(env, number, "whatsapp", acks)
    assert verdict.clean, verdict.line()
