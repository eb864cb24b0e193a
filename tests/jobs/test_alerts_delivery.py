"""The delivered-rate drop and dwell alerts against a simulated carrier filter: the sandbox
accepts every send and posts `sent`, but never `delivered`. Sends are made at clock times
passed in (`env.now`), so hours of history are made in seconds."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from app.clock import utcnow
from app.repo.alert_signals import dwelling_messages
from jobs.alerts import AlertEvaluator

from .alert_states import firing
from .conftest import Env

BATCH = 12


def send_batch(env: Env, number: dict[str, Any], tag: int) -> list[int]:
    ids = []
    for n in range(BATCH):
        message_id = env.send(number, f"1555125{tag:02d}{n:02d}")
        assert env.attempt(message_id).startswith("accepted")
        ids.append(message_id)
    env.settle(number)
    return ids


def test_a_carrier_filter_fires_the_delivered_rate_and_dwell_alerts_and_recovery_clears(
    env: Env,
) -> None:
    config = dataclasses.replace(
        env.config,
        alert_rate_min_sends=BATCH,
        alert_rate_window=3600.0,
        alert_rate_settle=600.0,
        alert_dwell_hours=2.0,
    )
    evaluator = AlertEvaluator(env.db, config)
    # The webhooks come after the acceptance is recorded, so `sent_at` is our clock.
    filtered = env.number(webhook_delay_ms=200)
    normal = env.number(webhook_delay_ms=200)
    t = utcnow()
    try:
        # Three hours ago both identities delivered everything: their baselines.
        env.now = t - timedelta(hours=3)
        send_batch(env, filtered, 1)
        send_batch(env, normal, 2)
        # Half an hour ago a carrier started filtering the first identity's messages.
        env.sandbox("PATCH", f"/numbers/{filtered['phone_number_id']}", json={"statuses": ["sent"]})
        env.now = t - timedelta(minutes=30)
        dropped = send_batch(env, filtered, 3)
        send_batch(env, normal, 4)
        assert all(env.message(i).status == "sent" for i in dropped)

        evaluator.run(t)
        alerts = firing(env)
        assert f"delivery_drop:{filtered['identity_id']}" in alerts
        assert f"delivery_drop:{normal['identity_id']}" not in alerts  # quiet at its rate
        assert not any(key.startswith("dwell:") for key in alerts)  # not long enough yet

        later = t + timedelta(hours=2)
        evaluator.run(later)
        alerts = firing(env)
        assert f"dwell:{filtered['identity_id']}" in alerts
        assert f"dwell:{normal['identity_id']}" not in alerts
        with env.db.transaction() as session:
            listed = dwelling_messages(session, later, timedelta(hours=2), None)
        assert sorted(m.id for m in listed) == sorted(dropped)

        # The carrier lets messages through again: the next window's sends are delivered.
        env.sandbox(
            "PATCH",
            f"/numbers/{filtered['phone_number_id']}",
            json={"statuses": ["sent", "delivered", "read"]},
        )
        env.now = later + timedelta(minutes=30)
        send_batch(env, filtered, 5)
        evaluator.run(later + timedelta(minutes=80))
        assert f"delivery_drop:{filtered['identity_id']}" not in firing(env)
    finally:
        evaluator.close()
