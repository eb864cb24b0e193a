"""A worker stopped between its claim and its call (SIGSTOP) for longer than its lease:
another worker re-claims and sends; the first, continued, stands down instead of sending a
second copy. The sandbox ignores idempotency keys, as the real Cloud API does."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from app.clock import utcnow
from app.models import MessageEvent
from jobs.send import send_one

from ..conftest import PG_URL, SECRET_KEY
from .conftest import Env
from .processes import is_stopped

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT, MARGIN, GRACE = 0.5, 0.5, 1.0  # a lease of 1.5 s


def run_paused_worker(env: Env, message_id: int, *flags: str) -> tuple[str, str]:
    child_env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": env.config.redis_url,
        "SECRET_KEY": SECRET_KEY,
        "RATCHET_PROVIDER_TIMEOUT": str(TIMEOUT),
        "RATCHET_LEASE_MARGIN": str(MARGIN),
        "RATCHET_WEBHOOK_GRACE": str(GRACE),
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.jobs.paused_worker", str(message_id), *flags],
        cwd=ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not is_stopped(child.pid):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the worker never reached its call"
            time.sleep(0.02)
        # Stopped after its claim: wait out its lease, then a second worker takes over.
        lease_until = env.message(message_id).lease_until
        assert lease_until is not None
        while utcnow() <= lease_until:
            time.sleep(0.05)
        config = dataclasses.replace(
            env.config, provider_timeout=TIMEOUT, lease_margin=MARGIN, webhook_grace=GRACE
        )
        # The re-claim waits the webhook grace (the paused call might have been made),
        # then the second worker sends.
        outcome, ring = send_one(env.db, env.box, config, message_id, utcnow)
        assert outcome.startswith("retry at") and ring is not None, outcome
        due = ring[1]
        outcome, _ = send_one(env.db, env.box, config, message_id, lambda: due)
        assert outcome.startswith("accepted"), outcome
        child.send_signal(signal.SIGCONT)
        stdout, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, stderr
    return stdout.strip().splitlines()[-1], stderr


@pytest.mark.slow
def test_a_worker_paused_past_its_lease_before_its_call_stands_down(env: Env) -> None:
    number = env.number(honour_idempotency_keys=False)
    message_id = env.send(number, "15551234000")
    outcome, log = run_paused_worker(env, message_id)
    assert outcome == "stood down: lease lapsed before the call"
    assert "lease lapsed before the call" in log and "standing down" in log
    assert len(env.accepted(number)) == 1  # the customer has one copy
    with env.db.transaction() as session:
        kinds = session.scalars(
            select(MessageEvent.kind)
            .where(MessageEvent.message_id == message_id)
            .order_by(MessageEvent.id)
        ).all()
    assert "stood_down" in kinds
    assert env.message(message_id).status in ("sent", "delivered", "read")


@pytest.mark.slow
def test_a_pause_the_lease_check_cannot_see_is_stopped_by_the_calls_latest_end(env: Env) -> None:
    """The same pause, hidden from the check (as one between the check and the call would
    be). The call's deadline is the check's own latest end, fixed at the claim, so the
    call never starts: the provider module refuses it (`not_started`) and the worker
    stands down, its give-back fenced off by the re-claim. No second copy. (Before, the
    call took its deadline from its own start, and this pause sent a second copy.)"""
    number = env.number(honour_idempotency_keys=False)
    message_id = env.send(number, "15551234001")
    outcome, log = run_paused_worker(env, message_id, "--no-check")
    # Stood down, and not given back: the second worker's claim holds the row.
    assert outcome == "stood down: lease lapsed before the call", outcome
    assert "standing down without sending" in log
    assert len(env.accepted(number)) == 1  # and no copy went out
    assert env.message(message_id).status in ("sent", "delivered", "read")
