"""What a failed attempt means for the next one (docs/design.md section 7). Pure: time passed in.

The provider module classifies; this decides: fail now, retry at a time, or hold the
message while its sender is broken. Caps count attempts of a class within one cycle.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from app.config import Config
from app.providers.base import FailureClass


class Step(StrEnum):
    RETRY = "retry"  # stay `sending`, next attempt at `at`
    FAIL = "fail"  # `sending -> failed` with `failure_class`
    HOLD = "hold"  # stay `sending`, no next attempt, identity paused
    # The cap is reached on an unknown outcome: stay `sending` for the webhook grace, then
    # record `failure_class` (exhausted) unless a webhook answered meanwhile.
    VERDICT = "verdict"


@dataclass(frozen=True, slots=True)
class Plan:
    step: Step
    failure_class: FailureClass
    at: datetime | None = None
    unknown_attempts: int = 0
    rate_limited_attempts: int = 0


def backoff(config: Config, n: int, jitter: float) -> float:
    """`min(max, base x 2^(n-1) x (1 + j))`: `n` attempts of that class so far, j in [0, 0.3]."""
    return min(config.backoff_max, config.backoff_base * 2 ** (n - 1) * (1 + jitter))


def plan_after_failure(
    config: Config,
    failure: FailureClass,
    now: datetime,
    *,
    unknown_attempts: int,
    rate_limited_attempts: int,
    retry_after: float | None = None,
    rng: random.Random | None = None,
    expires_at: datetime | None = None,
) -> Plan:
    """The next step after an attempt that was not accepted.

    `unknown_attempts` and `rate_limited_attempts` are the counts before this attempt;
    the plan carries them after it. A retry that would land at or after `expires_at` is
    not scheduled: the message fails `expired` (after an unknown outcome, once the webhook
    grace has passed, since the provider may have it).
    """
    plan = _plan(
        config,
        failure,
        now,
        unknown_attempts=unknown_attempts,
        rate_limited_attempts=rate_limited_attempts,
        retry_after=retry_after,
        rng=rng,
    )
    if expires_at is None or plan.step is not Step.RETRY or plan.at is None:
        return plan
    if plan.at < expires_at:
        return plan
    if failure is FailureClass.UNKNOWN:
        at = now + timedelta(seconds=config.webhook_grace)
        return Plan(
            Step.VERDICT, FailureClass.EXPIRED, at, plan.unknown_attempts, rate_limited_attempts
        )
    return Plan(Step.FAIL, FailureClass.EXPIRED, None, unknown_attempts, plan.rate_limited_attempts)


def _plan(
    config: Config,
    failure: FailureClass,
    now: datetime,
    *,
    unknown_attempts: int,
    rate_limited_attempts: int,
    retry_after: float | None,
    rng: random.Random | None,
) -> Plan:
    jitter = (rng or random).uniform(0.0, 0.3)
    if failure is FailureClass.UNKNOWN:
        n = unknown_attempts + 1
        if n >= config.cap_unknown:
            # The provider may have this one too: give its webhook the same grace as any
            # other unknown before calling the cycle exhausted.
            at = now + timedelta(seconds=config.webhook_grace)
            return Plan(Step.VERDICT, FailureClass.EXHAUSTED, at, n, rate_limited_attempts)
        # Wait for the provider's webhook before sending again: it may have the message.
        wait = max(config.webhook_grace, backoff(config, n, jitter))
        return Plan(Step.RETRY, failure, now + timedelta(seconds=wait), n, rate_limited_attempts)
    if failure in (FailureClass.RATE_LIMITED, FailureClass.PAIR_LIMITED):
        n = rate_limited_attempts + 1
        if n >= config.cap_rate_limited:
            return Plan(Step.FAIL, FailureClass.EXHAUSTED, None, unknown_attempts, n)
        if failure is FailureClass.PAIR_LIMITED:
            wait = config.pair_limit_wait
        elif retry_after is not None and retry_after >= 0:
            wait = min(retry_after, config.retry_after_max)
        else:
            wait = backoff(config, n, jitter)
        return Plan(Step.RETRY, failure, now + timedelta(seconds=wait), unknown_attempts, n)
    if failure is FailureClass.SENDER_BROKEN:
        # Not the message's fault: the attempt counts against no cap.
        return Plan(Step.HOLD, failure, None, unknown_attempts, rate_limited_attempts)
    return Plan(Step.FAIL, failure, None, unknown_attempts, rate_limited_attempts)
