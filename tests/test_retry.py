"""The next step after a failed attempt: docs/design.md section 7's classes, formula and caps."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from app.config import Config
from app.providers.base import FailureClass
from app.retry import Step, backoff, plan_after_failure

from .conftest import SECRET_KEY, T0

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})


@pytest.mark.parametrize("n", range(1, 12))
def test_backoff_follows_the_formula_with_jitter_between_0_and_30_percent(n: int) -> None:
    low, high = backoff(CONFIG, n, 0.0), backoff(CONFIG, n, 0.3)
    assert low == min(300.0, 2.0 * 2 ** (n - 1))
    assert high == min(300.0, 2.0 * 2 ** (n - 1) * 1.3)
    rng = random.Random(n)
    plan = plan_after_failure(
        CONFIG,
        FailureClass.RATE_LIMITED,
        T0,
        unknown_attempts=0,
        rate_limited_attempts=n - 1,
        rng=rng,
    )
    if n < CONFIG.cap_rate_limited:
        assert plan.at is not None
        assert low <= (plan.at - T0).total_seconds() <= high


def test_an_unknown_outcome_waits_at_least_the_webhook_grace() -> None:
    plan = plan_after_failure(
        CONFIG, FailureClass.UNKNOWN, T0, unknown_attempts=0, rate_limited_attempts=0
    )
    assert plan.step is Step.RETRY and plan.at == T0 + timedelta(seconds=15)
    late = plan_after_failure(
        CONFIG,
        FailureClass.UNKNOWN,
        T0,
        unknown_attempts=3,
        rate_limited_attempts=0,
        rng=random.Random(1),
    )
    assert late.at is not None and (late.at - T0).total_seconds() >= 16  # backoff(4) > grace


def test_the_fifth_unknown_attempt_owes_exhausted_after_the_webhook_grace() -> None:
    plan = plan_after_failure(
        CONFIG, FailureClass.UNKNOWN, T0, unknown_attempts=4, rate_limited_attempts=0
    )
    # Not failed at once: the provider may hold this attempt too, and its webhook gets the
    # same grace as any other unknown outcome's before the cycle is called exhausted.
    assert (plan.step, plan.failure_class, plan.unknown_attempts) == (
        Step.VERDICT,
        FailureClass.EXHAUSTED,
        5,
    )
    assert plan.at == T0 + timedelta(seconds=CONFIG.webhook_grace)


def test_rate_and_pair_limits_share_a_cap_of_ten() -> None:
    for failure in (FailureClass.RATE_LIMITED, FailureClass.PAIR_LIMITED):
        ok = plan_after_failure(CONFIG, failure, T0, unknown_attempts=0, rate_limited_attempts=8)
        done = plan_after_failure(CONFIG, failure, T0, unknown_attempts=0, rate_limited_attempts=9)
        assert ok.step is Step.RETRY and done.failure_class is FailureClass.EXHAUSTED


def test_retry_after_is_honoured_up_to_fifteen_minutes() -> None:
    given = plan_after_failure(
        CONFIG,
        FailureClass.RATE_LIMITED,
        T0,
        unknown_attempts=0,
        rate_limited_attempts=0,
        retry_after=42,
    )
    capped = plan_after_failure(
        CONFIG,
        FailureClass.RATE_LIMITED,
        T0,
        unknown_attempts=0,
        rate_limited_attempts=0,
        retry_after=7200,
    )
    assert given.at == T0 + timedelta(seconds=42)
    assert capped.at == T0 + timedelta(minutes=15)


def test_a_pair_limit_waits_six_seconds() -> None:
    plan = plan_after_failure(
        CONFIG,
        FailureClass.PAIR_LIMITED,
        T0,
        unknown_attempts=0,
        rate_limited_attempts=0,
        retry_after=100,
    )
    assert plan.at == T0 + timedelta(seconds=6)


@pytest.mark.parametrize("failure", [FailureClass.PERMANENT, FailureClass.NEEDS_HUMAN])
def test_definite_failures_fail_at_once(failure: FailureClass) -> None:
    plan = plan_after_failure(CONFIG, failure, T0, unknown_attempts=2, rate_limited_attempts=1)
    assert (plan.step, plan.failure_class) == (Step.FAIL, failure)


def test_a_broken_sender_holds_the_message_and_counts_no_attempt() -> None:
    plan = plan_after_failure(
        CONFIG, FailureClass.SENDER_BROKEN, T0, unknown_attempts=2, rate_limited_attempts=1
    )
    assert (plan.step, plan.unknown_attempts, plan.rate_limited_attempts) == (Step.HOLD, 2, 1)
