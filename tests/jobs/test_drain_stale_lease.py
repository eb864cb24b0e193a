"""A drain stopped just before its claim (SIGSTOP, a GC pause, a frozen VM, here inside the
pacing call) must not send after another drain's re-claim. It reads both clocks together,
the monotonic one first, right before the claim, so the lease it stamps and the time its
pre-call check allows start at the same moment. With the stop, the sandbox (ignoring
idempotency keys) still holds one copy and no double send is flagged. (Found by review:
the clock was read at the top of the step, long before the claim.)
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import select

from app.clock import utcnow
from app.models import Identity, MessageEvent
from app.repo.messages import NewMessage, create_message
from jobs.drain import Drain, drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys, ring_drain
from jobs.sweep import sweep_once

from .conftest import Env


class StoppedOnce(Pacer):
    """The drain's process is stopped (SIGSTOP) while in its first `take`."""

    def __init__(self, redis: Redis, stop_for: float) -> None:
        super().__init__(redis)
        self.stop_for = stop_for
        self.stopped = False

    def take(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        if not self.stopped:
            self.stopped = True
            time.sleep(self.stop_for)
        return super().take(*args, **kwargs)


@pytest.mark.parametrize("stop_for", [0.0, 8.0])
def test_a_drain_stopped_before_its_claim_never_sends_after_another_drains_re_claim(
    env: Env, stop_for: float
) -> None:
    cfg = dataclasses.replace(
        env.config,
        provider_timeout=3.0,
        webhook_grace=2.0,
        backoff_base=0.1,
        lease_margin=0.5,
        drain_slice=2.0,
        drain_concurrency=1,
    )
    # lease 6.5 s, latest start 3.0 s after the claim, drain key 8.5 s
    # A hang of 2 s leaves a second of slack on a busy machine before the latest start (the
    # second call begins after the first's hang) and before the 3 s deadline (the second's
    # answer). With 2.7 s, a loaded run once timed the accepted call out: an unknown
    # outcome, retried after the grace, and this sandbox ignores idempotency keys and sends
    # no webhook, so it held two copies (the designed retry, not the stale clock).
    number = env.number(statuses=[], hang_seconds=2.0, rate_limit_mps=None)
    with env.db.transaction() as session:
        identity = session.get(Identity, number["identity_id"])
        assert identity is not None
        identity.reply_rate, identity.campaign_rate, identity.total_rate = 10, 50, 60
        ids = []
        for n, to in enumerate(["15550000013", "15550000001"]):  # hang-then-503, accept-then-hang
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
    redis: Redis = env.app.extensions["ratchet.redis"]
    iid = number["identity_id"]
    pending, _ = drain_keys(iid, "campaign")
    lease_ms = int(cfg.drain_lease_seconds * 1000)
    assert ring_drain(drain, iid, "campaign", lease_ms, redis)
    token_a = redis.get(pending).decode()

    a = Drain(env.db, env.box, cfg, redis, StoppedOnce(redis, stop_for), iid, "campaign")
    results: dict[str, str] = {}

    def run_a() -> None:
        with env.app.app_context():
            results["A"] = a.run(token_a)

    thread = threading.Thread(target=run_a)
    thread.start()

    # The sweeper, and a worker running whatever drain it rings.
    ran = {token_a}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        sweep_once(env.db, cfg, utcnow())
        raw = redis.get(pending)
        if raw is not None and raw.decode() not in ran:
            token = raw.decode()
            ran.add(token)
            other = Drain(env.db, env.box, cfg, redis, Pacer(redis), iid, "campaign")
            results[token] = other.run(token)
        if not thread.is_alive() and all(env.message(i).status != "sending" for i in ids[1:]):
            break
        time.sleep(0.1)
    thread.join(timeout=10)

    with env.db.transaction() as session:
        events = [
            (e.received_at.strftime("%S.%f")[:6], e.kind, e.detail)
            for e in session.scalars(
                select(MessageEvent)
                .where(MessageEvent.message_id == ids[1])
                .order_by(MessageEvent.id)
            )
        ]
    per_recipient = Counter(m["to"] for m in env.accepted(number))
    assert per_recipient["15550000001"] <= 1, "the provider accepted the message twice"
    assert not any(kind == "double_send" for _, kind, _ in events)
