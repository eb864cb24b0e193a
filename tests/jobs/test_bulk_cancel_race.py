"""A bulk cancel racing a real drain on PostgreSQL: every message ends either sent once
(the sandbox accepted exactly one copy) or canceled (it accepted none), never both."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter

import pytest
from sqlalchemy import select

from app.clock import utcnow
from app.models import Message
from app.repo.bulkplans import confirm_plan
from app.repo.bulkpreviews import QueuedFilters, load_preview, preview_cancel
from app.repo.bulkrun import run_chunk
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys, get_queue

from .conftest import Env

MESSAGES = 60


@pytest.mark.slow
def test_a_bulk_cancel_racing_a_drains_claims_ends_each_message_sent_once_or_canceled(
    env: Env,
) -> None:
    number = env.number()
    identity_id = number["identity_id"]
    # Paced so that the drain cannot send all of them before the cancel starts (unpaced, a
    # fast drain sometimes did, and then nothing raced), yet claims go on while it runs.
    env.set_rates(number, campaign_rate=20.0, total_rate=20.0)
    recipients = [f"1555700{n:04d}" for n in range(MESSAGES)]
    ids = [env.send(number, to, lane="campaign") for to in recipients]
    with env.db.transaction() as session:
        preview = preview_cancel(
            session, QueuedFilters(identity_id=identity_id), {}, utcnow(), actor="ops@race.test"
        )
        assert preview.total == MESSAGES
        confirm_plan(
            session,
            preview.plan.id,
            None,
            {group.key for group in preview.groups},
            utcnow(),
            actor="ops@race.test",
            reason="campaign sent by mistake",
        )
    plan_id = preview.plan.id
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "race", px=60_000)
    # Small batches: the drain claims a few at a time, so claims and cancels interleave.
    config = dataclasses.replace(env.config, drain_batch=4)
    # The API rang a drain job no worker will run: with it queued, a drain short of a pacing
    # slot would hand its worker back instead of waiting, and stop.
    get_queue("campaign", redis).empty()
    drain = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign")
    errors: list[BaseException] = []

    def drain_it() -> None:
        try:
            with env.app.app_context():  # a drain rings itself again at the end of a slice
                drain.run("race")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def cancel_them() -> None:
        try:
            # Start once the drain has claimed its first batch, so both sides really race.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with env.db.transaction() as session:
                    claimed = session.scalar(
                        select(Message.id).where(
                            Message.identity_id == identity_id, Message.status != "queued"
                        )
                    )
                if claimed is not None:
                    break
                time.sleep(0.002)
            while True:
                with env.db.transaction() as session:
                    if run_chunk(session, plan_id, utcnow(), limit=3).finished:
                        return
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=drain_it), threading.Thread(target=cancel_them)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not [thread for thread in threads if thread.is_alive()], "a side hung"
    assert not errors, errors
    # Whatever the drain had claimed and not finished goes on: let it end.
    redis.set(drain_keys(identity_id, "campaign")[0], "after", px=60_000)
    Drain(env.db, env.box, env.config, redis, Pacer(redis), identity_id, "campaign").run("after")
    env.settle(number)

    accepted = Counter(item["to"] for item in env.accepted(number))
    with env.db.transaction() as session:
        rows = {
            m.recipient: (m.status, m.failure_class)
            for m in session.scalars(select(Message).where(Message.id.in_(ids)))
        }
        plan = load_preview(session, plan_id, None).plan
    canceled = [to for to, (status, cls) in rows.items() if cls == "canceled"]
    sent = [to for to, (status, _) in rows.items() if status in ("sent", "delivered", "read")]
    assert sorted(canceled + sent) == sorted(recipients), rows
    assert all(rows[to] == ("failed", "canceled") for to in canceled)
    assert all(accepted[to] == 0 for to in canceled), "a canceled message reached the provider"
    assert all(accepted[to] == 1 for to in sent), "a sent message went more than once"
    assert canceled and sent, f"no race happened: {rows} {drain.outcomes}"
    assert plan.status == "done"
    assert (plan.done, plan.skipped_claimed, plan.skipped_changed) == (len(canceled), len(sent), 0)
