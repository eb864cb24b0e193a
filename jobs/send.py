"""The send job: one RQ job per message, carrying its id only (docs/design.md section 7).

`send_message(id)` is claim, call, record:
1. Claim the row in one fenced update (or exit quietly: nothing to do, or not ours).
2. Call the provider outside any transaction, with our provider key and correlation id,
   within a total deadline shorter than the lease.
3. Record the outcome with fenced writes through the state machine, keep the attempt and
   the provider's verbatim answer, and ring the next attempt for its time.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from flask import current_app
from rq.timeouts import JobTimeoutException
from sqlalchemy.orm import Session

from app import instruments
from app.clock import utcnow
from app.config import Config
from app.crypto import SecretBox, get_box
from app.db import Database, get_db
from app.logs import log_context
from app.models import Identity, Message
from app.providers import PROVIDERS, get_provider
from app.providers.base import (
    Credentials,
    FailureClass,
    OutboundMessage,
    Provider,
    ProviderError,
    SendResult,
)
from app.repo.claims import Claim, claim_message, due_again_at
from app.repo.events import note_worker_event
from app.repo.identities import get_identity, pause_identity, reveal_secrets, token_problem
from app.repo.messages import get_message
from app.repo.sending import (
    Hold,
    accept_at_once,
    finish_attempt,
    mark_lost_attempt,
    record_accepted,
    record_failed,
    record_held,
    record_late_acceptance,
    record_retry,
    release_unsent,
    start_attempt,
    take_verdict,
)
from app.repo.watermarks import stamp_call_start
from app.retry import Step, plan_after_failure
from jobs.queues import ring

log = logging.getLogger(__name__)


LOST_LEASE_ERROR = {
    "provider": None,
    "message": "the worker's lease expired before it recorded an answer; outcome unknown",
}


def provider_key_for(message_id: int, key_cycle: int, fingerprint: str) -> str:
    """Stable for an intent (message and key cycle), derived, never random."""
    material = f"ratchet:{message_id}:{key_cycle}:{fingerprint}"
    return hashlib.sha256(material.encode()).hexdigest()[:40]


def send_message(message_id: int) -> str:
    """The RQ job. Returns what happened, for the job's result and the logs."""
    outcome, next_ring = send_one(
        get_db(), get_box(), current_app.config["RATCHET"], message_id, utcnow
    )
    if next_ring is not None:
        lane, at = next_ring
        ring(send_message, lane, message_id, at=at)
    return outcome


def ring_message(message_id: int, lane: str, identity_id: int) -> bool:
    """A message became due: ring its identity's drain for its lane (False: Redis is
    unreachable; the sweeper rings it later). The one entry point for views and commands.
    """
    # Imported here: the drains are built on this module's per-message step.
    from jobs.drain import ring_identity

    del message_id  # the drain finds it: the unit of work is the identity and lane
    return ring_identity(identity_id, lane, current_app.config["RATCHET"])


def sender_problem(box: SecretBox, identity: Identity) -> str | None:
    """Why this identity can never send as it stands (None: it can try).

    Such a message would otherwise be claimed, fail before the call and be re-rung for
    ever; instead the identity is held as a broken sender with this reason, and nothing
    is burned: no claim, no attempt.
    """
    if identity.provider not in PROVIDERS:
        return (
            f"Ratchet cannot send through {identity.provider} yet "
            f"(built: {', '.join(sorted(PROVIDERS))})"
        )
    try:
        secrets = reveal_secrets(box, identity)
    except ValueError:
        return (
            "the stored token or app secret cannot be decrypted with this SECRET_KEY; "
            "set it again with `identity update`, then `identity resume`"
        )
    problem = token_problem(secrets.token)
    if problem is not None:
        # Stored before tokens were checked, or past the checks: every call would fail
        # before it left, each burning an attempt.
        return f"{problem}; set it again with `identity update --token`, then `identity resume`"
    return None


@dataclass(frozen=True, slots=True)
class Prepared:
    """One claimed attempt, ready for its call: everything read inside the claim's
    transaction, so the call itself needs no database."""

    claim: Claim
    claimed_mono: float
    provider: Provider
    credentials: Credentials
    outbound: OutboundMessage
    lane: str
    recipient: str
    counts: tuple[int, int, bool]
    credentials_version: int = 0  # of the token read for this call


def send_one(
    db: Database,
    box: SecretBox,
    config: Config,
    message_id: int,
    clock: Callable[[], datetime],
    monotonic: Callable[[], float] = time.monotonic,
) -> tuple[str, tuple[str, datetime] | None]:
    """Claim, call, record. Returns (outcome word, (lane, time) of the next ring or None).

    `clock` is the wall clock the rows are stamped with; `monotonic` measures how long
    this process has held its claim (both passed in, so tests can move or freeze them).
    """
    lease = timedelta(seconds=config.lease_seconds)
    # 1. Claim (or record a verdict that is owed, or hold a sender that can never send).
    with db.transaction() as session:
        # Monotonic first: a pause between the readings can only shorten the lease the
        # pre-call check allows (see `Drain._step`).
        claimed_mono = monotonic()
        now = clock()
        verdict = take_verdict(session, message_id, now)
        if verdict is not None and verdict.applied:
            return f"failed: {FailureClass.EXHAUSTED.value} (after the webhook grace)", None
        message = get_message(session, message_id)
        if message is None:
            return "not claimed: no such message", None
        identity = get_identity(session, message.identity_id)
        assert identity is not None
        problem = None if identity.paused_at else sender_problem(box, identity)
        if problem is not None:
            hold_unsendable(session, identity, problem, now)
            return f"held: identity paused ({problem})", None
        claim = claim_message(session, message_id, now, lease)
        if claim is None:
            # Rung early (RQ keeps whole seconds) or not ours: ring again for its time.
            return "not claimed", due_again_at(session, message_id, now)
        prepared = prepare(session, box, config, identity, claim, claimed_mono, now)
        if not isinstance(prepared, Prepared):
            return prepared  # decided without a call
    # 2 and 3.
    return call_and_record(db, config, prepared, clock, monotonic)


def hold_unsendable(session: Session, identity: Identity, problem: str, now: datetime) -> None:
    if pause_identity(session, identity.id, problem, now):
        log.error("identity %s paused: %s", identity.id, problem)


def prepare(
    session: Session,
    box: SecretBox,
    config: Config,
    identity: Identity,
    claim: Claim,
    claimed_mono: float,
    now: datetime,
    *,
    message: Message | None = None,
    attempt_rows: list[dict[str, Any]] | None = None,
    credentials: Credentials | None = None,
) -> Prepared | tuple[str, tuple[str, datetime] | None]:
    """Inside the claim's transaction: the attempt row and what the call needs, or the
    outcome already decided (a re-claim after an expired lease makes no call).

    A drain passes the `message` it loaded with its batch, read after the claim,
    `attempt_rows` to gather the batch's attempt rows for one INSERT, and the identity's
    `credentials`, decrypted once for the batch."""
    message = message or get_message(session, claim.message_id)
    assert message is not None
    if claim.lease_lost:
        # The attempt whose lease expired never reported: an unknown outcome, already
        # counted by the claim. Its call may have ended only moments ago (a worker may
        # start it until `lease - deadline - margin` after its claim), so it gets the same
        # webhook grace as any unknown, from now: no call on this claim. At the cap, the
        # verdict waits the grace too.
        mark_lost_attempt(session, claim, now)
        plan = plan_after_failure(
            config,
            FailureClass.UNKNOWN,
            now,
            unknown_attempts=message.unknown_attempts - 1,
            rate_limited_attempts=message.rate_limited_attempts,
        )
        assert plan.at is not None
        verdict = plan.failure_class.value if plan.step is Step.VERDICT else None
        record_retry(
            session,
            claim,
            plan.at,
            failure_class=FailureClass.UNKNOWN.value,
            error=message.last_error or LOST_LEASE_ERROR,
            unknown_attempts=message.unknown_attempts,
            rate_limited_attempts=message.rate_limited_attempts,
            had_unknown=True,
            verdict=verdict,
        )
        waiting = f"{verdict} at" if verdict else "retry at"
        return (
            f"{waiting} {plan.at.isoformat()}: the last attempt's lease expired unanswered",
            (message.lane, plan.at),
        )
    key = provider_key_for(message.id, message.provider_key_cycle, message.fingerprint)
    start_attempt(session, claim, key, now, rows=attempt_rows)
    return Prepared(
        claim=claim,
        claimed_mono=claimed_mono,
        provider=get_provider(identity.provider),
        credentials=credentials or credentials_for(box, identity, config.public_base_url),
        outbound=OutboundMessage(
            recipient=message.recipient,
            body_text=message.body_text,
            template=message.template,
            provider_key=key,
            correlation_id=message.correlation_id or "",
            tag=message.tag,
        ),
        lane=message.lane,
        recipient=message.recipient,
        counts=(
            message.unknown_attempts,
            message.rate_limited_attempts,
            message.had_unknown_outcome,
        ),
        credentials_version=identity.credentials_version,
    )


def credentials_for(
    box: SecretBox, identity: Identity, public_base_url: str | None = None
) -> Credentials:
    """What a provider call needs of the identity, its secrets decrypted. With our public
    address, the status callback URL too (Twilio is told it with every send)."""
    secrets = reveal_secrets(box, identity)
    return Credentials(
        account_id=identity.account_id,
        base_url=identity.base_url,
        token=secrets.token,
        app_secret=secrets.app_secret,
        sender=identity.sender,
        status_callback_url=(
            status_callback_url(public_base_url, identity) if public_base_url else None
        ),
    )


def status_callback_url(public_base_url: str, identity: Identity) -> str | None:
    """The per-identity status webhook, for providers that are told it with each send."""
    if identity.provider != "twilio":
        return None
    return f"{public_base_url.rstrip('/')}/webhooks/twilio/{identity.id}"


def call_and_record(
    db: Database,
    config: Config,
    prepared: Prepared,
    clock: Callable[[], datetime],
    monotonic: Callable[[], float] = time.monotonic,
    on_result: Callable[[SendResult], None] | None = None,
) -> tuple[str, tuple[str, datetime] | None]:
    """The call and its record: the per-message step the send job and the drains share."""
    claim = prepared.claim
    with log_context(
        message_id=claim.message_id,
        attempt=claim.attempt,
        identity_id=claim.identity_id,
        lane=prepared.lane,
    ):
        return _call_and_record(db, config, prepared, clock, monotonic, on_result)


def _call_and_record(
    db: Database,
    config: Config,
    prepared: Prepared,
    clock: Callable[[], datetime],
    monotonic: Callable[[], float],
    on_result: Callable[[SendResult], None] | None,
) -> tuple[str, tuple[str, datetime] | None]:
    claim = prepared.claim
    # 2. Call, outside any transaction: the row is leased to us, but only for `lease`.
    #    A worker paused since its claim (SIGSTOP, a GC or swap pause, a frozen VM) may
    #    have lost the message to another worker's re-claim, which may have sent it; so
    #    the whole call must still fit inside the lease, measured on this process's
    #    monotonic clock (the wall clock can jump). The total deadline then keeps the call
    #    inside the lease once it starts. What is left is a pause between this check and
    #    the first byte on the wire: a few lines of Python, with no I/O of ours between
    #    them. Closing it needs the provider's help (an idempotency key it honours).
    if not fits_in_lease(config, prepared.claimed_mono, monotonic()):
        now = clock()
        outcome, released = stand_down(db, claim, config, monotonic() - prepared.claimed_mono, now)
        return outcome, (prepared.lane, now) if released else None
    started = time.monotonic()
    call_started = clock()  # what a watermark is compared with (app/repo/watermarks.py)
    try:
        result = prepared.provider.send(
            prepared.credentials, prepared.outbound, timeout=config.provider_timeout
        )
    except JobTimeoutException:
        raise  # the job's own time is up: its handling stays RQ's
    except Exception as exc:
        result = call_crashed(prepared.credentials, prepared.provider.name, exc)
    count_send(prepared.provider.name, prepared.lane, result, time.monotonic() - started)

    # 3. Record, then let the caller react to the answer (a drain adjusts its pace). On a
    #    connection pinged first, however recently used: one whose path died silently
    #    during the call would make an accepted send an unknown outcome.
    with db.transaction(ping=True) as session:
        now = clock()
        stamp_call_start(session, claim, prepared.provider.name, call_started)
        recorded = record_outcome(
            session,
            config,
            claim,
            result,
            prepared.counts,
            now,
            prepared.lane,
            credentials_version=prepared.credentials_version,
        )
    if on_result is not None:
        on_result(result)
    return recorded


def call_crashed(credentials: Credentials, provider: str, exc: Exception) -> SendResult:
    """A call that raised where a provider module answers with a result: a fault of ours
    (a bug, a value the request cannot be built from). It is recorded like a lost answer,
    an unknown outcome in the exception's own words, since what left the process cannot be
    told: the message waits the webhook grace, and at the cap it fails `exhausted` with
    those words as its reason. Escaping instead, it ended the drain with the identity's key
    held and its claims leased, each re-claimed as a lost lease with no reason of its own.
    The words may quote a header, so the identity's secrets are cut out of them, and no
    traceback (which would repeat them) is logged: only where it was raised.
    """
    words = redacted(f"{type(exc).__name__}: {exc}", credentials)
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    log.error("the %s call raised instead of answering (at %s): %s", provider, where, words)
    error = ProviderError(
        provider=provider, title="Ratchet's own error during the call", message=words, raw=words
    )
    return SendResult(failure=FailureClass.UNKNOWN, error=error, outcome_known=False)


def redacted(text: str, credentials: Credentials) -> str:
    """`text` with the identity's secrets cut out, in the forms a request carries them:
    as given, escaped (a repr of the string or its bytes), percent-encoded, and Twilio's
    basic-auth pair in base64."""
    forms: set[str] = set()
    for secret in (credentials.token, credentials.app_secret):
        if secret:
            encoded = secret.encode("utf-8", "backslashreplace")
            forms |= {secret, repr(secret)[1:-1], repr(encoded)[2:-1], quote(secret, safe="")}
    if credentials.token:
        pair = f"{credentials.account_id}:{credentials.token}".encode("utf-8", "backslashreplace")
        forms.add(base64.b64encode(pair).decode("ascii"))
    for form in sorted(forms, key=len, reverse=True):  # the longest first: no partial cut
        if form:
            text = text.replace(form, "[secret]")
    return text


def count_send(provider: str, lane: str, result: SendResult, seconds: float) -> None:
    """This process's send counters and latency histogram (`/metrics`)."""
    instruments.PROVIDER_LATENCY.labels(provider).observe(seconds)
    outcome = "accepted" if result.accepted else "failed"
    failure = "none" if result.accepted else (result.failure or FailureClass.NEEDS_HUMAN).value
    instruments.SENDS.labels(provider, lane, outcome, failure).inc()


def fits_in_lease(config: Config, claimed_mono: float, now_mono: float) -> bool:
    """The call, begun now, ends inside the lease: claim + lease - deadline - margin."""
    latest_start = config.lease_seconds - config.provider_timeout - config.lease_margin
    return now_mono - claimed_mono <= latest_start


def stand_down(
    db: Database, claim: Claim, config: Config, held_for: float, now: datetime
) -> tuple[str, bool]:
    """No call: too late for one to end inside the lease (a worker paused since its claim,
    or a call queued behind others). No request left this process, so the message is given
    back, due again at once, the attempt counted against no cap (`release_unsent`), unless
    the lease was re-claimed meanwhile: then the re-claim counts it unknown, which is safe."""
    log.warning(
        "message %s attempt %s: lease lapsed before the call (claimed %.1f s ago, lease "
        "%.1f s, deadline %.1f s); standing down without sending",
        claim.message_id,
        claim.attempt,
        held_for,
        config.lease_seconds,
        config.provider_timeout,
    )
    with db.transaction() as session:
        released = release_unsent(session, claim, now)
        note_worker_event(
            session,
            claim.message_id,
            claim.cycle,
            "stood_down",
            now,
            {
                "attempt": claim.attempt,
                "why": "lease lapsed before the call",
                "held_for_seconds": round(held_for, 3),
                "lease_seconds": config.lease_seconds,
                "released": released,
            },
        )
    if released:
        return "stood down: lease lapsed before the call; due again", True
    return "stood down: lease lapsed before the call", False


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
