"""`send_at`, `valid_for` and `expires_at` read from a send request (issue 34): what is
stored, what is refused, what the fingerprint covers, and a retry that would come after
the message's expiry. Pure: the time is passed in."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.config import Config
from app.providers.base import FailureClass
from app.retry import Step, plan_after_failure
from app.schedule import schedule
from app.sendrequest import RequestError, fingerprint, parse_send_request

from .conftest import SECRET_KEY, T0

CONFIG = Config.from_env({}, {"secret_key": SECRET_KEY})
BASE = {"identity_id": 1, "to": "15551234567", "text": "hi"}


def parsed(**extra: object):
    return parse_send_request({**BASE, **extra}, None)


def test_a_send_at_ahead_is_stored_and_one_past_means_now() -> None:
    ahead = schedule(parsed(send_at="2026-11-30T14:00:00+01:00"), T0)
    assert ahead.not_before == T0 + timedelta(hours=1) and ahead.expires_at is None
    assert schedule(parsed(send_at="2026-11-30T11:00:00Z"), T0).not_before is None


def test_a_validity_counts_from_when_the_message_is_due() -> None:
    assert schedule(parsed(valid_for=600), T0).expires_at == T0 + timedelta(minutes=10)
    later = schedule(parsed(send_at="2026-12-01T12:00:00Z", valid_for=600), T0)
    assert later.expires_at == T0 + timedelta(days=1, minutes=10)
    given = schedule(parsed(expires_at="2026-11-30T12:30:00Z"), T0)
    assert given.expires_at == T0 + timedelta(minutes=30)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"send_at": "tomorrow"}, "send_at"),
        ({"send_at": "2026-12-01T12:00:00"}, "send_at"),  # no offset
        ({"send_at": 1796040000}, "send_at"),  # a number is not ISO 8601
        ({"valid_for": 0}, "valid_for"),
        ({"valid_for": 35 * 86400 + 1}, "valid_for"),
        ({"valid_for": True}, "valid_for"),
        ({"expires_at": "2026-12-01"}, "expires_at"),
        # Before year 1 in UTC: a 500 before the check (OverflowError in the comparison).
        ({"send_at": "0001-01-01T00:00:00+14:00"}, "send_at"),
        ({"expires_at": "9999-12-31T23:59:59-14:00"}, "expires_at"),
    ],
)
def test_malformed_times_and_validities_are_refused_by_the_request(
    extra: dict[str, object], field: str
) -> None:
    with pytest.raises(RequestError) as refused:
        parsed(**extra)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"send_at": "2027-01-05T12:00:01Z"}, "send_at"),  # 35 days and a second
        ({"valid_for": 60, "expires_at": "2026-12-01T12:00:00Z"}, "valid_for"),
        ({"send_at": "2026-12-01T12:00:00Z", "expires_at": "2026-12-01T11:00:00Z"}, "expires_at"),
        ({"expires_at": "2026-11-30T11:59:59Z"}, "expires_at"),
        ({"expires_at": "2027-01-05T12:00:01Z"}, "expires_at"),
    ],
)
def test_times_out_of_range_are_refused_against_the_clock(
    extra: dict[str, object], field: str
) -> None:
    with pytest.raises(RequestError) as refused:
        schedule(parsed(**extra), T0)
    assert refused.value.field == field


def test_the_fingerprint_covers_the_times_and_not_how_the_offset_is_written() -> None:
    plain = fingerprint(parsed(), "15551234567")
    at = fingerprint(parsed(send_at="2026-12-01T12:00:00Z"), "15551234567")
    same = fingerprint(parsed(send_at="2026-12-01T13:00:00+01:00"), "15551234567")
    valid = fingerprint(parsed(valid_for=60), "15551234567")
    expires = fingerprint(parsed(expires_at="2026-12-01T12:00:00Z"), "15551234567")
    assert at == same
    assert len({plain, at, valid, expires}) == 4


def test_a_retry_that_would_come_after_the_expiry_is_not_scheduled() -> None:
    expires_at = T0 + timedelta(seconds=30)
    limited = plan_after_failure(
        CONFIG,
        FailureClass.RATE_LIMITED,
        T0,
        unknown_attempts=0,
        rate_limited_attempts=0,
        retry_after=60,
        expires_at=expires_at,
    )
    assert (limited.step, limited.failure_class) == (Step.FAIL, FailureClass.EXPIRED)
    assert limited.rate_limited_attempts == 1
    # An unknown outcome: the provider may have it, so its webhook gets the grace first.
    unknown = plan_after_failure(
        CONFIG,
        FailureClass.UNKNOWN,
        T0,
        unknown_attempts=0,
        rate_limited_attempts=0,
        expires_at=T0 + timedelta(seconds=1),
    )
    assert (unknown.step, unknown.failure_class) == (Step.VERDICT, FailureClass.EXPIRED)
    assert unknown.at == T0 + timedelta(seconds=CONFIG.webhook_grace)
    # One that comes before it is scheduled as ever.
    sooner = plan_after_failure(
        CONFIG,
        FailureClass.RATE_LIMITED,
        T0,
        unknown_attempts=0,
        rate_limited_attempts=0,
        retry_after=10,
        expires_at=expires_at,
    )
    assert (sooner.step, sooner.at) == (Step.RETRY, T0 + timedelta(seconds=10))
