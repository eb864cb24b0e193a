"""A Messenger watermark covers only the messages whose call started at or before it, by our
clock: a batch claimed together but queued behind a busy call thread is stamped with each
call's own start, never the claim's (docs/design.md, watermarks)."""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta

from app.clock import utcnow
from app.models import Identity
from app.providers.base import Watermark
from app.repo.inbox import store_delivery, store_statuses
from app.repo.status_apply import apply_webhook_status
from app.repo.watermarks import watermark_statuses
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from ..views.messenger_bodies import PSID, ms
from .conftest import Env
from .sandbox_pages import customer_writes, page


class SteppingClock:
    """Our clock for the drain, one second further at each reading: the claim, then each
    call's start and its record come one after another, in that order, on one thread."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self.readings: list[datetime] = []
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            self.now += timedelta(seconds=1)
            self.readings.append(self.now)
            return self.now


def deliver_watermark(env: Env, target: dict[str, str], status: str, watermark_ms: int) -> None:
    """What `/webhooks/messenger` does with a verified watermark: store it, then apply it."""
    page_id, identity_id = target["phone_number_id"], int(target["identity_id"])
    mark = Watermark(page_id, PSID, status, watermark_ms, utcnow())
    now = utcnow()
    with env.db.transaction() as session:
        delivery_id = store_delivery(session, "messenger", identity_id, {}, "{}", now)
        incoming = watermark_statuses(session, "messenger", [mark], {page_id: identity_id})
        status_ids, _ = store_statuses(session, delivery_id, incoming, now)
    for status_id in status_ids:
        with env.db.transaction() as session:
            apply_webhook_status(session, status_id, now)


def test_a_watermark_between_two_calls_of_one_claimed_batch_covers_only_the_first(
    env: Env,
) -> None:
    target = page(env, receipts=[], echoes=False)
    customer_writes(env, target, PSID)
    identity_id = target["identity_id"]
    with env.db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None
        identity.campaign_rate = identity.total_rate = 500.0
    ids = [env.send(target, PSID, text=f"part {n}", lane="campaign") for n in range(3)]
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "watermark", px=60_000)
    # One batch of three, one call thread: the second and third calls wait for the first.
    config = dataclasses.replace(env.config, drain_batch=3, drain_concurrency=1)
    clock = SteppingClock(env.now)
    drain = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign", clock)

    summary = drain.run("watermark")

    assert "3 accepted" in summary, summary
    rows = [env.message(message_id) for message_id in ids]
    assert [row.status for row in rows] == ["sent"] * 3
    starts = [row.request_started_ms for row in rows]
    assert None not in starts and starts == sorted(starts) and len(set(starts)) == 3
    claimed_ms = ms(rows[0].last_attempt_at)  # the batch's one claim
    assert all(start > claimed_ms for start in starts if start is not None)

    # Meta's watermark half a second after the first call started: before the second's.
    first = starts[0]
    assert first is not None
    deliver_watermark(env, target, "delivered", first + 500)

    assert [env.message(message_id).status for message_id in ids] == [
        "delivered",
        "sent",
        "sent",
    ]
