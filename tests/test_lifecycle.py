"""The state machine, tested exhaustively against docs/design.md section 3's tables.

The expectations below are written from the design's text, independently of the
`ALLOWED` table in `app/lifecycle.py`, so a wrong entry there fails here.
"""

from __future__ import annotations

import itertools

import pytest

from app.lifecycle import (
    Refusal,
    Source,
    Status,
    allowed_from,
    decide,
    is_advanced,
    is_terminal,
)

ORDER = ["queued", "sending", "sent", "delivered", "read"]


def expected_to_apply(source: str, current: str, target: str) -> bool:
    if source == "worker":
        return (current, target) in {
            ("queued", "sending"),
            ("sending", "sent"),
            ("sending", "failed"),
            ("queued", "failed"),  # its validity ended before any claim: `expired`
        }
    if source == "webhook":
        if target == "failed":
            return current in ("sending", "sent")
        if target in ("sent", "delivered", "read"):
            return current != "failed" and ORDER.index(current) < ORDER.index(target)
        return False
    if source == "operator":
        # A requeue, and a cancel of a message no worker has claimed yet.
        return (current, target) in {("failed", "queued"), ("queued", "failed")}
    return False  # the API only creates; it never moves a message


CASES = list(itertools.product(Source, Status, Status))


@pytest.mark.parametrize(("source", "current", "target"), CASES, ids=lambda v: str(v))
def test_every_move_applies_exactly_when_the_design_allows_it(
    source: Source, current: Status, target: Status
) -> None:
    decision = decide(source, current, target)
    assert decision.applies is expected_to_apply(source.value, current.value, target.value)
    assert (current in allowed_from(source, target)) is decision.applies
    if decision.applies:
        assert decision.refusal is None
    else:
        assert decision.refusal is not None


@pytest.mark.parametrize(("source", "current", "target"), CASES, ids=lambda v: str(v))
def test_nothing_but_a_requeue_moves_backwards_or_leaves_failed(
    source: Source, current: Status, target: Status
) -> None:
    if not decide(source, current, target).applies:
        return
    if current is Status.FAILED:
        assert (source, target) == (Source.OPERATOR, Status.QUEUED)
    elif target is not Status.FAILED:
        assert ORDER.index(target.value) > ORDER.index(current.value)


@pytest.mark.parametrize("current", ["sent", "delivered", "read", "failed"])
def test_nothing_re_enters_sending_from_a_higher_state(current: str) -> None:
    for source in Source:
        assert not decide(source, Status(current), Status.SENDING).applies


@pytest.mark.parametrize(
    ("current", "target"),
    [("delivered", "sent"), ("read", "sent"), ("read", "delivered")],
)
def test_a_late_lower_webhook_is_refused_as_late_and_fills_its_own_timestamp(
    current: str, target: str
) -> None:
    decision = decide(Source.WEBHOOK, Status(current), Status(target))
    assert decision.refusal is Refusal.LATE
    assert decision.fills_own_timestamp


@pytest.mark.parametrize("target", ["sent", "delivered", "read"])
def test_a_late_webhook_after_failed_is_refused_and_keeps_failed(target: str) -> None:
    decision = decide(Source.WEBHOOK, Status.FAILED, Status(target))
    assert decision.refusal is Refusal.FAILED_IS_FINAL
    assert not decision.fills_own_timestamp


@pytest.mark.parametrize("current", ["delivered", "read"])
def test_failed_after_the_phone_showed_the_message_is_refused(current: str) -> None:
    assert decide(Source.WEBHOOK, Status(current), Status.FAILED).refusal is Refusal.ALREADY_SHOWN


def test_the_worker_recording_sent_after_a_webhook_got_further_is_late_not_an_error() -> None:
    assert decide(Source.WORKER, Status.DELIVERED, Status.SENT).refusal is Refusal.LATE


def test_skipping_is_allowed_for_webhooks() -> None:
    assert decide(Source.WEBHOOK, Status.SENDING, Status.DELIVERED).applies
    assert decide(Source.WEBHOOK, Status.SENT, Status.READ).applies


def test_a_repeated_status_is_refused_as_the_same() -> None:
    assert decide(Source.WEBHOOK, Status.DELIVERED, Status.DELIVERED).refusal is Refusal.SAME


def test_a_requeue_of_anything_but_failed_is_refused() -> None:
    for current in Status:
        if current is Status.FAILED:
            continue
        assert decide(Source.OPERATOR, current, Status.QUEUED).refusal in (
            Refusal.NOT_FAILED,
            Refusal.SAME,
        )


@pytest.mark.parametrize(
    ("status", "terminal", "advanced"),
    [
        ("queued", False, False),
        ("sending", False, False),
        ("sent", True, True),
        ("delivered", True, True),
        ("read", True, True),
        ("failed", True, False),
    ],
)
def test_terminal_and_advanced_states(status: str, terminal: bool, advanced: bool) -> None:
    assert is_terminal(Status(status)) is terminal
    assert is_advanced(Status(status)) is advanced


@pytest.mark.parametrize("current", ["sending", "sent", "delivered", "read"])
def test_a_cancel_after_a_workers_claim_is_refused_as_claimed(current: str) -> None:
    assert decide(Source.OPERATOR, Status(current), Status.FAILED).refusal is Refusal.CLAIMED
