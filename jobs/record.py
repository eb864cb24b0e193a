"""Record: a provider's answer written as the state machine allows, each write fenced on
the attempt and cycle (docs/design.md section 7, "Record"), and what to ring next.

`record_outcome` is the one place an answer becomes a state: accepted (`sent`, kept if a
webhook got further), a retry or a verdict owed after the grace, a held identity, or
`failed`. Every write is fenced, so a worker whose lease was taken over changes nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy.orm import Session

from app.config import Config
from app.logs import log_context
from app.providers.base import FailureClass, SendResult
from app.repo.acceptance import accept_at_once, record_accepted, record_late_acceptance
from app.repo.attempts import finish_attempt
from app.repo.claims import Claim
from app.repo.due import owed_verdicts
from app.repo.failures import record_failed, record_retry, take_verdict
from app.repo.give_back import Hold, record_held
from app.repo.messages import get_message
from app.retry import Step, plan_after_failure

log = logging.getLogger(__name__)


def record_outcome(
    session: Session,
    config: Config,
    claim: Claim,
    result: SendResult,
    counts: tuple[int, int, bool],
    now: datetime,
    lane: str,
    *,
    credentials_version: int | None = None,
    expires_at: datetime | None = None,
) -> tuple[str, tuple[str, datetime] | None]:
    unknown_attempts, rate_limited_attempts, had_unknown = counts
    error = result.error.to_dict() if result.error else None
    if result.accepted:
        assert result.provider_message_id is not None
        if (
            accept_at_once(
                session,
                claim,
                result.provider_message_id,
                now,
                http_status=result.http_status,
                response_body=result.response_body,
                unknown_attempts=unknown_attempts,
                had_unknown=had_unknown,
            )
            is not None
        ):
            return "accepted (sent)", None
        finish_attempt(
            session,
            claim,
            now,
            "accepted",
            http_status=result.http_status,
            provider_message_id=result.provider_message_id,
            response_body=result.response_body,
        )
        transition = record_accepted(
            session,
            claim,
            result.provider_message_id,
            now,
            unknown_attempts=unknown_attempts,
            had_unknown=had_unknown,
        )
        if transition is None:
            late = record_late_acceptance(session, claim, result.provider_message_id, now)
            if late is None:
                return "accepted, not recorded: the lease was taken over", None
            state = late.to_status if late.applied else "kept"
            return f"accepted late ({state}): the lease had been taken over", None
        return f"accepted ({transition.to_status if transition.applied else 'kept'})", None

    failure = result.failure or FailureClass.NEEDS_HUMAN
    finish_attempt(
        session,
        claim,
        now,
        failure.value,
        http_status=result.http_status,
        error=error,
        response_body=result.response_body,
    )
    plan = plan_after_failure(
        config,
        failure,
        now,
        unknown_attempts=unknown_attempts,
        rate_limited_attempts=rate_limited_attempts,
        retry_after=result.retry_after,
        expires_at=expires_at,
    )
    had_unknown = had_unknown or not result.outcome_known
    if plan.step in (Step.RETRY, Step.VERDICT):
        # Stay `sending` until `plan.at`: then another attempt, or (at the cap) the verdict.
        assert plan.at is not None
        verdict = plan.failure_class.value if plan.step is Step.VERDICT else None
        if not record_retry(
            session,
            claim,
            plan.at,
            failure_class=failure.value,
            error=error,
            unknown_attempts=plan.unknown_attempts,
            rate_limited_attempts=plan.rate_limited_attempts,
            had_unknown=had_unknown,
            verdict=verdict,
        ):
            return _not_recorded(session, claim, failure), None
        if verdict is None:
            return f"retry at {plan.at.isoformat()} ({failure.value})", (lane, plan.at)
        return (
            f"{verdict} at {plan.at.isoformat()} unless a webhook answers ({failure.value})",
            (lane, plan.at),
        )
    if plan.step is Step.HOLD:
        reason = _reason(result)
        hold = record_held(
            session,
            claim,
            now,
            error=error,
            reason=reason,
            credentials_version=credentials_version,
        )
        if hold is Hold.NOT_RECORDED:
            return _not_recorded(session, claim, failure), None
        if hold is Hold.STALE:
            return f"stale broken-sender answer ({reason}): due again", (lane, now)
        log.warning("identity %s paused: %s", claim.identity_id, reason)
        return f"held: identity paused ({reason})", None
    transition = record_failed(
        session,
        claim,
        now,
        failure_class=plan.failure_class.value,
        error=error,
        unknown_attempts=plan.unknown_attempts,
        rate_limited_attempts=plan.rate_limited_attempts,
        had_unknown=had_unknown,
    )
    if not transition.applied:
        return _not_recorded(session, claim, failure), None
    return f"failed: {plan.failure_class.value}", None


def take_owed_verdicts(session: Session, identity_id: int, lane: str, now: datetime) -> int:
    """A drain's step first records the verdicts owed (`take_verdict`): each message whose
    webhook grace ended without an answer fails `exhausted`. Returns how many."""
    taken = 0
    for message_id in owed_verdicts(session, identity_id, lane, now):
        verdict = take_verdict(session, message_id, now)
        taken += verdict is not None
        if verdict is not None and verdict.applied:
            with log_context(message_id=message_id, identity_id=identity_id, lane=lane):
                log.info("failed: exhausted (after the webhook grace)", extra={"outcome": "failed"})
    return taken


def _not_recorded(session: Session, claim: Claim, failure: FailureClass) -> str:
    """Why a fenced outcome write changed nothing: a webhook got further, or another
    attempt took the message over after our lease expired."""
    message = get_message(session, claim.message_id)
    if message is not None and message.cycle == claim.cycle and message.attempt == claim.attempt:
        return f"{failure.value}, but a webhook already moved it to {message.status}"
    return f"{failure.value}, not recorded: the lease was taken over"


def _reason(result: SendResult) -> str:
    error = result.error
    if error is None:
        return f"HTTP {result.http_status}"
    code = f"code {error.code}" if error.code is not None else f"HTTP {error.http_status}"
    return f"{code}: {error.title or error.message or 'no message'}"
