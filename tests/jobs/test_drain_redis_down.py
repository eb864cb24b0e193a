"""Redis goes down while a drain's batch is in flight (a real TCP proxy to Redis, cut). The
provider's definite answer (130429) is still recorded verbatim, since the outcome is written
before the drain reacts to it with Redis (its pace), and the drain stops quietly instead of
ending in a traceback. (Found by review: the pace was adjusted first, and its error lost
the answer.)
"""

from __future__ import annotations

import dataclasses
import threading
import time

from redis import Redis
from sqlalchemy import select

from app.clock import utcnow
from app.models import Attempt, Identity
from app.repo.messages import NewMessage, create_message
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from .conftest import Env
from .redis_proxy import Proxy


def test_redis_down_mid_batch_still_records_the_providers_answer_and_the_drain_stops_quietly(
    env: Env,
) -> None:
    # Both calls in flight at once, each answered after 1 s: the 130429 arrives after the cut.
    cfg = dataclasses.replace(env.config, provider_timeout=3.0, drain_concurrency=2)
    number = env.number(statuses=[], hang_seconds=1.0, rate_limit_mps=None, answer_delay_ms=1000)
    with env.db.transaction() as session:
        identity = session.get(Identity, number["identity_id"])
        assert identity is not None
        ids = []
        for n, to in enumerate(["15550000013", "15550000004"]):  # hang-then-503; 130429 once
            message, _ = create_message(
                session,
                NewMessage(
                    tenant_id=identity.tenant_id,
                    identity_id=identity.id,
                    recipient=to,
                    lane="campaign",
                    fingerprint=str(n).ljust(64, "f"),
                    body_text=f"hello {n}",
                ),
                utcnow(),
            )
            ids.append(message.id)
    real: Redis = env.app.extensions["ratchet.redis"]
    kwargs = real.connection_pool.connection_kwargs
    proxy = Proxy(kwargs.get("port", 6379))
    redis = Redis(host="127.0.0.1", port=proxy.port, db=kwargs.get("db", 0), socket_timeout=2)
    iid = number["identity_id"]
    pending, _ = drain_keys(iid, "campaign")
    redis.set(pending, "tok", px=int(cfg.drain_lease_seconds * 1000))

    drain = Drain(env.db, env.box, cfg, redis, Pacer(redis), iid, "campaign")
    raised: list[BaseException] = []

    def run() -> None:
        with env.app.app_context():
            try:
                drain.run("tok")
            except BaseException as exc:  # what RQ would log as the job's traceback
                raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the first call (hanging 1 s) is in flight
        with env.db.transaction() as session:
            if session.scalar(select(Attempt.id).where(Attempt.message_id == ids[0])):
                break
        time.sleep(0.02)
    proxy.cut()  # Redis is down from here on
    thread.join(20)
    redis.close()
    redis.connection_pool.disconnect()

    m = env.message(ids[1])
    with env.db.transaction() as session:
        attempts = [
            (a.number, a.outcome, a.http_status)
            for a in session.scalars(select(Attempt).where(Attempt.message_id == ids[1]))
        ]
    assert not raised, "the drain crashed with a traceback"
    assert m.failure_class == "rate_limited", "the provider's 130429 answer was never recorded"
    assert attempts and attempts[0][1] == "rate_limited"  # kept on the attempt, verbatim
