"""The code table: every documented WhatsApp error code lands in the class that
docs/design.md section 7 gives.

The expectations are written here from the design text, not read from the table under test:
T -> unknown (rate limits 4, 80007, 130429 -> rate_limited; 131056 -> pair_limited);
P -> permanent (templates 132000-132016 -> needs_human); A and A/slow -> sender_broken.
"""

from __future__ import annotations

import pytest

from app.providers.base import FailureClass
from app.providers.classification import (
    CODES,
    UnknownProviderCodesError,
    classify,
    describe,
)
from app.providers.dead_letter_order import ACTIONABLE_ORDER, dead_letter_rank

U = FailureClass.UNKNOWN
RL = FailureClass.RATE_LIMITED
PL = FailureClass.PAIR_LIMITED
P = FailureClass.PERMANENT
NH = FailureClass.NEEDS_HUMAN
SB = FailureClass.SENDER_BROKEN

WHATSAPP_CODES: dict[int, FailureClass] = {
    # A: auth, permissions, account locked or blocked, unregistered number.
    0: SB,
    3: SB,
    10: SB,
    190: SB,
    **dict.fromkeys(range(200, 300), SB),
    131031: SB,
    131042: SB,
    368: SB,
    133010: SB,
    # A/slow: spam-limited.
    131048: SB,
    # T, rate limits.
    4: RL,
    80007: RL,
    130429: RL,
    # T, per recipient.
    131056: PL,
    # T: temporarily unavailable, unknown failure, register attempts.
    131000: U,
    131016: U,
    1: U,
    2: U,
    133016: U,
    # P.
    131049: P,
    131050: P,
    131047: P,
    131026: P,
    100: P,
    131008: P,
    131009: P,
    131051: P,
    131021: P,
    130472: P,
    131052: P,
    131053: P,
    # P, templates (132015 "paused" included).
    132000: NH,
    132001: NH,
    132005: NH,
    132007: NH,
    132012: NH,
    132015: NH,
    132016: NH,
}


@pytest.mark.parametrize(("code", "expected"), sorted(WHATSAPP_CODES.items()))
def test_every_documented_whatsapp_code_maps_to_its_design_class(
    code: int, expected: FailureClass
) -> None:
    assert classify("whatsapp", 400, code) is expected
    described = describe("whatsapp", code)
    assert described is not None
    assert described.failure_class is expected
    assert described.meaning.strip() and described.action.strip()
    assert "\n" not in described.meaning


@pytest.mark.parametrize(("code", "expected"), [(20429, RL), (63016, P), (63018, RL)])
def test_the_twilio_codes_live_in_the_same_table(code: int, expected: FailureClass) -> None:
    assert classify("twilio", 400, code) is expected


@pytest.mark.parametrize("code", [132002, 132010, 132014])
def test_the_rest_of_the_template_range_is_a_template_problem(code: int) -> None:
    assert classify("whatsapp", 400, code) is NH
    described = describe("whatsapp", code)
    assert described is not None and "emplate" in described.meaning


@pytest.mark.parametrize("http_status", [None, 200, 400, 429, 500, 503])
def test_a_code_we_do_not_know_needs_a_human_whatever_the_http_status(
    http_status: int | None,
) -> None:
    assert classify("whatsapp", http_status, 999999) is NH
    assert describe("whatsapp", 999999) is None


@pytest.mark.parametrize(
    ("http_status", "expected"),
    [
        (None, U),  # no answer at all
        (500, U),
        (502, U),
        (503, U),
        (504, U),
        (429, RL),
        (401, SB),
        (403, SB),
        (400, NH),
        (404, NH),
        (413, NH),
        (422, NH),
    ],
)
def test_without_a_code_the_http_status_decides(
    http_status: int | None, expected: FailureClass
) -> None:
    assert classify("whatsapp", http_status, None) is expected
    assert classify("twilio", http_status, None) is expected


@pytest.mark.parametrize(
    ("http_status", "code", "expected"),
    [
        (400, 131000, U),  # not "other 4xx": the code says temporarily failed
        (500, 131026, P),  # not "5xx": the code says undeliverable
        (429, 131056, PL),
        (401, 131047, P),
        (403, 130429, RL),
        (200, 190, SB),
        (500, 132015, NH),
    ],
)
def test_the_code_beats_the_http_status(
    http_status: int, code: int, expected: FailureClass
) -> None:
    assert classify("whatsapp", http_status, code) is expected


def test_an_unknown_provider_name_is_an_error_not_a_guess() -> None:
    with pytest.raises(UnknownProviderCodesError, match="whatsap"):
        classify("whatsap", 400, 131047)
    with pytest.raises(KeyError):
        describe("nope", 1)


def test_no_provider_code_maps_to_exhausted() -> None:
    # `exhausted` is the worker's verdict on a cap, never something a provider says.
    for table in CODES.values():
        assert FailureClass.EXHAUSTED not in {c.failure_class for c in table.values()}


def test_dead_letters_a_person_can_act_on_come_first() -> None:
    ranked = sorted(
        [
            ("permanent 131026", dead_letter_rank("whatsapp", P, 131026)),
            ("unknown code", dead_letter_rank("whatsapp", NH, 999999)),
            ("window closed", dead_letter_rank("whatsapp", P, 131047)),
            ("template", dead_letter_rank("whatsapp", NH, 132001)),
            ("exhausted", dead_letter_rank("whatsapp", FailureClass.EXHAUSTED, 131000)),
            ("twilio window closed", dead_letter_rank("twilio", P, 63016)),
        ],
        key=lambda pair: pair[1],
    )
    assert [name for name, _ in ranked] == [
        "exhausted",
        "template",
        "window closed",
        "twilio window closed",
        "unknown code",
        "permanent 131026",
    ]
    assert dead_letter_rank("whatsapp", P, 131026) == len(ACTIONABLE_ORDER)


@pytest.mark.parametrize(
    ("failure_class", "retryable"),
    [(U, True), (RL, True), (PL, True), (P, False), (NH, False), (SB, False)],
)
def test_only_transient_classes_are_retryable(failure_class: FailureClass, retryable: bool) -> None:
    assert failure_class.is_retryable is retryable
