"""The other alerts: an identity paused by a broken sender, and dead letters growing faster
than the threshold. Sends through the sandbox; the evaluator's `now` passed in."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from app.models import AlertEpisode
from jobs.alerts import AlertEvaluator

from .alert_states import firing
from .conftest import Env


def test_a_broken_sender_pauses_the_identity_and_the_paused_alert_fires_with_the_reason(
    env: Env,
) -> None:
    number = env.number()
    message_id = env.send(number, "15550000009")  # 401 / 190: the token is invalid
    env.attempt(message_id)
    evaluator = AlertEvaluator(env.db, env.config)
    try:
        evaluator.run(env.now + timedelta(seconds=1))
    finally:
        evaluator.close()
    key = f"paused:{number['identity_id']}"
    assert key in firing(env)
    with env.db.transaction() as session:
        episode = session.query(AlertEpisode).filter_by(alert_key=key).one()
        assert "190" in (episode.fired_figures["reason"] or "")
        assert "paused" in episode.summary


def test_dead_letters_growing_past_the_threshold_fire_and_clear_when_the_window_passes(
    env: Env,
) -> None:
    config = dataclasses.replace(env.config, alert_dead_letters=3, alert_dead_letter_window=600.0)
    number = env.number()
    ids = [env.send(number, to) for to in ("15550000005", "15550000006", "15550000007")]
    for message_id in ids:
        assert env.attempt(message_id).startswith("failed"), env.message(message_id).status
    evaluator = AlertEvaluator(env.db, config)
    key = f"dead_letters:{number['identity_id']}"
    try:
        evaluator.run(env.now + timedelta(seconds=1))
        assert key in firing(env)
        evaluator.run(env.now + timedelta(seconds=601))
        assert key not in firing(env)
    finally:
        evaluator.close()
