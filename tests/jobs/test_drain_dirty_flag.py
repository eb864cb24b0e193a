"""A drain whose key expired and was taken over by another (it was stopped longer than the
drain lease) must leave the new holder's dirty flag alone: only the holder may read and
clear it when it releases. Otherwise a message committed while the new holder was finishing
would have no drain pending, queued or scheduled, and only the sweeper could find it.
(Found by review: the release read the flag whoever held the key.)
"""

from __future__ import annotations

import threading

import pytest
from redis import Redis
from rq import Queue
from rq.registry import ScheduledJobRegistry

from app.clock import utcnow
from app.models import Identity
from app.repo.messages import NewMessage, create_message
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys, queue_name
from jobs.ringing import ring_identity

from .conftest import Env


class PausedBeforeExit(Drain):
    """Stopped (SIGSTOP) right after the step that found nothing due, before release."""

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.at_exit = threading.Event()
        self.go = threading.Event()

    def _step(self):  # type: ignore[no-untyped-def]
        step = super()._step()
        if step.stop:
            self.at_exit.set()
            assert self.go.wait(20)
        return step


def new_message(env: Env, identity_id: int) -> int:
    with env.db.transaction() as session:
        identity = session.get(Identity, identity_id)
        assert identity is not None
        message, _ = create_message(
            session,
            NewMessage(
                tenant_id=identity.tenant_id,
                identity_id=identity.id,
                recipient="15557770001",
                lane="campaign",
                fingerprint="x".ljust(64, "f"),
                body_text="hello",
            ),
            utcnow(),
        )
        return message.id


@pytest.mark.parametrize("stale_drain_runs", [False, True])
def test_a_drain_whose_key_was_taken_over_leaves_the_new_holders_dirty_flag_alone(
    env: Env, stale_drain_runs: bool
) -> None:
    number = env.number(statuses=[], rate_limit_mps=None)
    iid = number["identity_id"]
    redis: Redis = env.app.extensions["ratchet.redis"]
    pending, dirty = drain_keys(iid, "campaign")
    queue = Queue(queue_name("campaign"), connection=redis)
    lease_ms = int(env.config.drain_lease_seconds * 1000)
    redis.set(pending, "live-token", px=lease_ms)  # B's key, as ring_drain takes it

    live = PausedBeforeExit(env.db, env.box, env.config, redis, Pacer(redis), iid, "campaign")
    summary: dict[str, str] = {}

    def run_live() -> None:
        with env.app.app_context():
            summary["B"] = live.run("live-token")

    thread = threading.Thread(target=run_live)
    thread.start()
    assert live.at_exit.wait(20)  # B read the database: nothing due; it is about to exit

    message_id = new_message(env, iid)  # the API commits, then rings
    assert ring_identity(iid, "campaign", env.config)
    assert redis.get(dirty) == b"1" and queue.count == 0  # B holds the key: only the flag

    if stale_drain_runs:
        # A: the drain B took over from (stopped past its lease), resuming at its loop top.
        stale = Drain(env.db, env.box, env.config, redis, Pacer(redis), iid, "campaign")
        summary["A"] = stale.run("stale-token")

    live.go.set()
    thread.join(20)
    scheduled = ScheduledJobRegistry(queue=queue).count
    assert env.message(message_id).status == "queued"
    assert queue.count + scheduled >= 1 or redis.get(pending) is not None, (
        "an acknowledged, due message with no drain pending, queued or scheduled"
    )
