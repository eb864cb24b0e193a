"""Every sandbox fault recipient ends where docs/design.md section 7's table says, over HTTP."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.models import Attempt, Identity

from .conftest import Env

# to -> (final status, failure class, attempts, unknown attempts, rate-limited attempts,
#        the last error's code)
EXPECTED = {
    "15551230000": ("read", None, 1, 0, 0, None),  # an ordinary recipient
    "15550000003": ("read", None, 3, 2, 0, 131016),  # 503 twice, then accepted
    "15550000004": ("read", None, 2, 0, 1, 130429),  # 429 with Retry-After once
    "15550000005": ("failed", "permanent", 1, 0, 0, 131026),
    "15550000006": ("failed", "permanent", 1, 0, 0, 131047),
    "15550000007": ("failed", "needs_human", 1, 0, 0, 132001),
    "15550000008": ("failed", "needs_human", 1, 0, 0, 132015),
    "15550000010": ("failed", "permanent", 1, 0, 0, 131049),  # accepted, failed by webhook
    "15550000011": ("read", None, 1, 0, 0, None),  # delivered before sent
    "15550000012": ("read", None, 1, 0, 0, None),  # read without delivered
    "15550000013": ("failed", "exhausted", 5, 5, 0, None),  # hangs, never accepts
}


@pytest.mark.slow
@pytest.mark.parametrize("to", EXPECTED)
def test_each_fault_recipient_ends_where_the_class_table_says(env: Env, to: str) -> None:
    status, failure_class, attempts, unknown, rate_limited, code = EXPECTED[to]
    number = env.number()
    message_id = env.send(number, to)
    env.drive(number, message_id)
    row = env.message(message_id)
    assert (row.status, row.failure_class) == (status, failure_class)
    assert (row.attempt, row.unknown_attempts, row.rate_limited_attempts) == (
        attempts,
        unknown,
        rate_limited,
    )
    if code is not None:
        assert row.last_error is not None and row.last_error["code"] == code
        if to == "15550000010":  # reported by the `failed` webhook, as Meta wrote it
            assert row.last_error["http_status"] is None and row.last_error["title"]
        else:  # from a send's answer: its status and its body, verbatim
            answered = [r for r in env.requests(number) if r["error_code"] == code][-1]
            assert row.last_error["http_status"] == answered["http_status"]
            assert json.loads(row.last_error["raw"])["error"]["code"] == code
    with env.db.transaction() as session:
        rows = session.scalars(select(Attempt).where(Attempt.message_id == message_id)).all()
    assert len(rows) == attempts  # every attempt kept, with its verbatim answer
    assert all(a.finished_at is not None and (a.response_body or a.error) for a in rows)
    accepted = env.accepted(number)
    assert len(accepted) == (
        0
        if to in ("15550000005", "15550000006", "15550000007", "15550000008", "15550000013")
        else 1
    )
    if to == "15550000012":
        assert row.delivered_at is None and row.read_at is not None
    if to == "15550000013":  # no answer at all: the transport's own words are kept
        assert row.last_error is not None and row.last_error["code"] is None
        assert row.last_error["title"] == "DeadlineExceededError"


@pytest.mark.slow
def test_a_503_retry_waits_the_webhook_grace_and_then_the_backoff(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15550000003")
    env.attempt(message_id)
    row = env.message(message_id)
    assert row.status == "sending" and row.next_attempt_at is not None
    assert row.last_attempt_at is not None
    wait = (row.next_attempt_at - row.last_attempt_at).total_seconds()
    # max(grace 15 s, backoff(1) = 2 s x (1 + j), j in [0, 0.3]) = 15 s
    assert wait == pytest.approx(env.config.webhook_grace, abs=0.01)
    assert row.had_unknown_outcome


@pytest.mark.slow
def test_a_429_waits_what_retry_after_says(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15550000004")
    env.attempt(message_id)
    row = env.message(message_id)
    assert row.next_attempt_at is not None and row.last_attempt_at is not None
    assert (row.next_attempt_at - row.last_attempt_at) == timedelta(seconds=2)
    assert (row.failure_class, row.rate_limited_attempts) == ("rate_limited", 1)


@pytest.mark.slow
def test_a_send_that_times_out_after_acceptance_waits_for_the_webhook_and_is_not_resent(
    env: Env,
) -> None:
    """The sandbox ignores idempotency keys (like the real Cloud API): a blind retry would
    text twice. Its webhooks come after our timeout but within the grace, so the retry
    finds the message advanced and makes no second call."""
    number = env.number(honour_idempotency_keys=False, webhook_delay_ms=1800)
    message_id = env.send(number, "15550000001")
    assert env.attempt(message_id).endswith("(unknown)")
    waiting = env.message(message_id)
    assert waiting.status == "sending" and waiting.next_attempt_at is not None
    assert waiting.last_attempt_at is not None
    # Without the grace the retry would be due after backoff(1), 2 to 2.6 s.
    assert waiting.next_attempt_at - waiting.last_attempt_at >= timedelta(
        seconds=env.config.webhook_grace
    )
    deadline = time.monotonic() + 10  # the webhooks, 1.8 s after the send
    while env.message(message_id).status == "sending" and time.monotonic() < deadline:
        time.sleep(0.05)
    env.settle(number)
    env.now = waiting.next_attempt_at
    assert env.attempt(message_id) == "not claimed"
    row = env.message(message_id)
    assert row.status in ("sent", "delivered", "read") and row.attempt == 1
    assert row.provider_message_id == env.accepted(number)[0]["wamid"]  # adopted
    assert len(env.accepted(number)) == 1 and len(env.requests(number)) == 1


@pytest.mark.slow
def test_a_reset_after_acceptance_is_not_resent_either(env: Env) -> None:
    number = env.number(honour_idempotency_keys=False)
    message_id = env.send(number, "15550000002")
    env.drive(number, message_id)
    assert env.message(message_id).status == "read"
    assert len(env.requests(number)) == 1


@pytest.mark.slow
def test_with_keys_honoured_and_no_webhook_the_retry_reuses_the_key_and_one_message_exists(
    env: Env,
) -> None:
    number = env.number(honour_idempotency_keys=True, statuses=[])
    message_id = env.send(number, "15550000001")
    outcomes = env.drive(number, message_id)
    row = env.message(message_id)
    assert outcomes[0].endswith("(unknown)") and outcomes[-1].startswith("accepted")
    assert (row.status, row.attempt) == ("sent", 2)
    requests = env.requests(number)
    assert [r["outcome"] for r in requests] == ["accepted", "replayed"]
    assert requests[0]["idempotency_key"] == requests[1]["idempotency_key"]
    assert len(env.accepted(number)) == 1
    assert row.provider_message_id == env.accepted(number)[0]["wamid"]


@pytest.mark.slow
def test_the_request_carries_our_key_and_correlation_id(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15551239999")
    env.drive(number, message_id)
    sent = env.accepted(number)[0]
    row = env.message(message_id)
    assert sent["body"]["biz_opaque_callback_data"] == row.correlation_id
    assert len(sent["idempotency_key"]) == 40


@pytest.mark.slow
def test_a_job_for_a_message_a_webhook_already_advanced_makes_no_call(env: Env) -> None:
    number = env.number()
    message_id = env.send(number, "15551230001")
    env.drive(number, message_id)
    assert env.message(message_id).status == "read"
    assert env.attempt(message_id) == "not claimed"
    assert len(env.requests(number)) == 1


@pytest.mark.slow
def test_a_paused_identity_holds_its_queue(env: Env) -> None:
    number = env.number()
    with env.db.transaction() as session:
        identity = session.get(Identity, number["identity_id"])
        assert identity is not None
        identity.paused_at = env.now
    message_id = env.send(number, "15551230002")
    assert env.attempt(message_id) == "not claimed"
    assert env.message(message_id).status == "queued"
    assert env.requests(number) == []
