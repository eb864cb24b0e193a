"""Calls a drain abandons before they begin are given back as never sent, and a call never
runs past the pre-call check's own latest end.

Found by an outside review: a drain cut short (its job's time up, the database or Redis
gone) cancelled the calls still queued for a thread and left their claims to lapse; each
came back as a lost lease, an unknown outcome that waited the webhook grace and counted
toward `exhausted`, for a message no request had carried."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest
from rq.timeouts import JobTimeoutException, UnixSignalDeathPenalty

from app.providers import get_provider
from app.providers.base import Credentials, OutboundMessage
from app.repo.claims import claim_batch
from app.repo.identities import get_identity
from jobs.call import call, record_batch
from jobs.drain import Drain
from jobs.pacing import Pacer
from jobs.queues import drain_keys
from jobs.send import prepare_batch

from .conftest import Env

NO_ANSWER = "15550000013"  # the sandbox answers only after hang_seconds, accepting nothing


def test_a_job_timeout_gives_back_the_calls_not_yet_begun_as_never_sent(env: Env) -> None:
    """One call thread, a batch of two: the first call waits for its deadline, the second
    is queued behind it when RQ's own job timeout (its SIGALRM death penalty) cuts the
    drain short. The second is given back: due again now, no lease, no unknown outcome."""
    number = env.number(statuses=[], hang_seconds=30.0, rate_limit_mps=None)
    identity_id = number["identity_id"]
    env.set_rates(number, campaign_rate=500.0, total_rate=500.0)
    stuck = env.send(number, NO_ANSWER, lane="campaign")
    queued = env.send(number, "15557120001", lane="campaign")
    redis = env.app.extensions["ratchet.redis"]
    redis.set(drain_keys(identity_id, "campaign")[0], "cut", px=60_000)
    config = dataclasses.replace(
        env.config, provider_timeout=5.0, drain_batch=2, drain_concurrency=1, drain_slice=30.0
    )
    drain = Drain(env.db, env.box, config, redis, Pacer(redis), identity_id, "campaign")

    with pytest.raises(JobTimeoutException), UnixSignalDeathPenalty(2, JobTimeoutException):
        drain.run("cut")

    given_back = env.message(queued)
    assert given_back.status == "sending"
    assert given_back.lease_until is None and given_back.next_attempt_at is not None
    assert (given_back.unknown_attempts, given_back.had_unknown_outcome) == (0, False)
    assert env.attempt_outcomes(queued) == ["stood_down"]
    assert [r.get("to") for r in env.requests(number)] == [NO_ANSWER]  # never called
    # The call that had begun ran to its deadline before the drain let go: unknown.
    assert env.message(stuck).unknown_attempts == 1
    assert drain.outcomes["given back"] == 1


def test_a_call_never_starts_past_the_latest_end_it_is_given(env: Env) -> None:
    """The pre-call check's latest end is the call's deadline, whatever its timeout: a
    call handed a latest end already past (a pause between the check and the call) sends
    nothing, instead of running a whole timeout past the lease."""
    number = env.number(statuses=[], rate_limit_mps=None)
    credentials = Credentials(
        account_id=number["phone_number_id"],
        base_url=f"{env.sandbox_url}/v21.0",
        token="good-token",
    )
    message = OutboundMessage(
        recipient="15557120002", body_text="hello", provider_key="k" * 40, correlation_id="c"
    )

    result = get_provider("whatsapp").send(
        credentials, message, timeout=5.0, not_after=time.monotonic() - 0.001
    )

    assert not result.accepted and result.outcome_known
    assert env.requests(number) == []
    assert result.not_started


def test_a_call_refused_by_its_own_latest_end_stands_down_and_counts_nothing(env: Env) -> None:
    """Found by an outside review: the pre-call check passed, then the thread was paused
    past the check's latest end; the provider module refused to start the call (no request
    left), and yet the attempt was recorded as an unknown outcome: the webhook grace waited,
    and at the cap the message failed `exhausted`, never sent. Now it stands down, given
    back unsent and counted against no cap, round after round."""
    number = env.number(statuses=[], rate_limit_mps=None)
    message_id = env.send(number, "15557120003", lane="campaign")
    config = env.config
    for _ in range(config.cap_unknown + 1):
        with env.db.transaction() as session:
            claims = claim_batch(
                session,
                number["identity_id"],
                "campaign",
                1,
                env.now,
                timedelta(seconds=config.lease_seconds),
            )
            identity = get_identity(session, number["identity_id"])
            [prepared], _ = prepare_batch(
                session, env.box, config, identity, claims, time.monotonic(), env.now
            )
        # The check sees no time passed since the claim (its clock is passed in); the
        # call's latest end, on the real clock, passed a whole lease ago.
        paused = dataclasses.replace(prepared, claimed_mono=time.monotonic() - config.lease_seconds)
        called = call(config, paused, lambda at=paused.claimed_mono: at, env.clock)
        assert called.result is None and called.started_at is None
        [(_, outcome, _)] = record_batch(env.db, config, [called], env.clock)
        assert outcome.startswith("stood down")
        row = env.message(message_id)
        assert (row.status, row.unknown_attempts, row.had_unknown_outcome) == ("sending", 0, False)
        assert row.lease_until is None and row.next_attempt_at == env.now  # due again now
    assert env.requests(number) == []
    assert set(env.attempt_outcomes(message_id)) == {"stood_down"}
