"""An identity's default validity per lane (issue 34): what an admin may type, its bounds
(those of `valid_for`), how it is shown, and how it combines with the request's own
`valid_for` and `expires_at`. Pure: the time is passed in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.schedule import schedule, with_default_validity
from app.sendrequest import MAX_AHEAD_SECONDS, parse_send_request
from app.validity import (
    MAX_VALIDITY,
    ValidityError,
    check_validity,
    describe_validity,
    parse_validity,
    written_validity,
)

from .conftest import T0

BASE = {"identity_id": 1, "to": "15551234567", "text": "hi"}


def parsed(**extra: object):
    return parse_send_request({**BASE, **extra}, None)


@pytest.mark.parametrize(
    ("written", "seconds"),
    [
        ("600", 600),
        ("600s", 600),
        ("10m", 600),
        ("10min", 600),
        (" 24h ", 86400),
        ("24 H", 86400),
        ("35d", MAX_AHEAD_SECONDS),
        ("", None),
        ("none", None),
        ("None", None),
    ],
)
def test_it_reads_seconds_or_a_number_with_a_unit_or_none(
    written: str, seconds: int | None
) -> None:
    assert parse_validity(written) == seconds


@pytest.mark.parametrize(
    "written",
    ["0", "0s", "36d", f"{MAX_AHEAD_SECONDS + 1}", "-5", "1.5h", "ten minutes", "10w", "1e3"],
)
def test_it_refuses_zero_past_the_maximum_and_what_is_not_a_validity(written: str) -> None:
    with pytest.raises(ValidityError):
        parse_validity(written)


@pytest.mark.parametrize("value", [0, -1, MAX_VALIDITY + 1, True, 1.5, "60"])
def test_a_stored_value_is_bounded_like_valid_for(value: object) -> None:
    with pytest.raises(ValidityError):
        check_validity(value)  # type: ignore[arg-type]


def test_the_maximum_is_the_maximum_of_valid_for() -> None:
    assert MAX_VALIDITY == MAX_AHEAD_SECONDS
    assert check_validity(MAX_VALIDITY) == MAX_VALIDITY


@given(st.integers(min_value=1, max_value=MAX_VALIDITY))
def test_what_the_form_shows_reads_back_as_the_same_seconds(seconds: int) -> None:
    assert parse_validity(written_validity(seconds)) == seconds


def test_it_is_described_in_the_largest_exact_unit() -> None:
    assert [describe_validity(s) for s in (None, 90, 600, 86400, 90000)] == [
        "no limit",
        "90 s",
        "10 min",
        "1 d",
        "25 h",
    ]


def test_the_default_applies_from_when_the_message_is_due() -> None:
    now_ = with_default_validity(schedule(parsed(), T0), parsed(), 600, T0)
    assert now_.expires_at == T0 + timedelta(minutes=10)
    later = parsed(send_at="2026-12-01T12:00:00Z")
    scheduled = with_default_validity(schedule(later, T0), later, 600, T0)
    assert scheduled.not_before == T0 + timedelta(days=1)
    assert scheduled.expires_at == T0 + timedelta(days=1, minutes=10)


def test_no_default_means_no_limit() -> None:
    assert with_default_validity(schedule(parsed(), T0), parsed(), None, T0).expires_at is None


@pytest.mark.parametrize(
    ("extra", "expires"),
    [
        ({"valid_for": 86400}, T0 + timedelta(days=1)),  # longer than the default: still wins
        ({"valid_for": 60}, T0 + timedelta(minutes=1)),
        ({"expires_at": "2026-11-30T15:00:00Z"}, T0 + timedelta(hours=3)),
    ],
)
def test_the_request_s_own_validity_wins(extra: dict[str, object], expires: object) -> None:
    request = parsed(**extra)
    assert with_default_validity(schedule(request, T0), request, 600, T0).expires_at == expires
