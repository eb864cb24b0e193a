"""Call: one claimed attempt sent to its provider, outside any transaction, and its answer
recorded (docs/design.md section 7, "Lease and the pre-call check" and "Call").

The lease's rules live here: a call starts only while it still fits inside its lease
(`fits_in_lease`) and ends by the check's own latest end (`latest_end`), and an attempt
that made no call gives its message back unsent (`stand_down`, `give_back`).
"""

from __future__ import annotations

import base64
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from rq.timeouts import JobTimeoutException
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app import instruments
from app.config import Config
from app.db import Database
from app.logs import log_context
from app.providers.base import (
    Credentials,
    FailureClass,
    OutboundMessage,
    Provider,
    ProviderError,
    SendResult,
)
from app.providers.http import DeadlineExceededError
from app.repo.accept_batch import Acceptance, accept_many
from app.repo.attempts import finish_attempt
from app.repo.claims import Claim
from app.repo.events import note_worker_event
from app.repo.expiry import EXPIRED, expired_error
from app.repo.failures import record_failed
from app.repo.give_back import release_unsent
from app.repo.watermarks import WATERMARKED, stamp_call_start
from jobs.record import record_outcome

log = logging.getLogger(__name__)


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
    expires_at: datetime | None = None  # never called at or after this (`valid_for`)


@dataclass(frozen=True, slots=True)
class Called:
    """A call's end, ready for its record: the provider's answer, or None when the call
    never began (too late to fit inside its lease: it stands down)."""

    prepared: Prepared
    result: SendResult | None
    held_for: float  # seconds from the claim to the call's start (or its stand-down)
    # Our clock just before the request: what a watermark is compared with
    # (`app/repo/watermarks.py`); None when the call never began.
    started_at: datetime | None = None
    expired: bool = False  # never began: the message's validity ended before its start


def call(
    config: Config,
    prepared: Prepared,
    monotonic: Callable[[], float],
    clock: Callable[[], datetime],
) -> Called:
    """2. Call, outside any transaction and with no database: the row is leased to us, but
    only for `lease`. A worker paused since its claim (SIGSTOP, a GC or swap pause, a
    frozen VM) may have lost the message to another worker's re-claim, which may have sent
    it; so the whole call must still fit inside the lease, measured on this process's
    monotonic clock (the wall clock can jump). The total deadline then keeps the call
    inside the lease once it starts, and is itself never later than the check's own latest
    end (`latest_end`), so a pause between this check and the call cannot carry the call
    past the lease: it shortens it. Nor does a call start once the message has expired
    (`expires_at`, on the drain's clock): it is recorded `expired`, never sent late."""
    now_mono = monotonic()
    held_for = now_mono - prepared.claimed_mono
    if not fits_in_lease(config, prepared.claimed_mono, now_mono):
        return Called(prepared, None, held_for)
    started_at = clock()
    if prepared.expires_at is not None and started_at >= prepared.expires_at:
        return Called(prepared, None, held_for, expired=True)
    started = time.monotonic()
    try:
        result = prepared.provider.send(
            prepared.credentials,
            prepared.outbound,
            timeout=config.provider_timeout,
            not_after=latest_end(config, prepared.claimed_mono),
        )
    except JobTimeoutException:
        raise  # the job's own time is up: its handling stays RQ's
    except DeadlineExceededError as exc:
        if not exc.request_sent:  # a provider module that raised its refusal to start
            return Called(prepared, None, monotonic() - prepared.claimed_mono)
        result = call_crashed(prepared.credentials, prepared.provider.name, exc)
    except Exception as exc:
        result = call_crashed(prepared.credentials, prepared.provider.name, exc)
    if result.not_started:
        # The pre-call check passed, then a pause (SIGSTOP, a swap, many threads on few
        # cores) carried the call past the check's latest end: the provider module refused
        # to start it. No request left: it stands down and is given back, as if the check
        # had failed, never an unknown outcome counted toward `exhausted`.
        return Called(prepared, None, monotonic() - prepared.claimed_mono)
    count_send(prepared.provider.name, prepared.lane, result, time.monotonic() - started)
    return Called(prepared, result, held_for, started_at)


def record_called(
    session: Session, config: Config, called: Called, now: datetime
) -> tuple[str, tuple[str, datetime] | None]:
    """3. Record one call's end inside the caller's transaction: its answer through the
    state machine (`record_outcome`), or its stand-down."""
    prepared = called.prepared
    claim = prepared.claim
    with log_context(
        message_id=claim.message_id,
        attempt=claim.attempt,
        identity_id=claim.identity_id,
        lane=prepared.lane,
    ):
        if called.expired:
            return record_expired(session, claim, prepared, now), None
        if called.result is None or called.started_at is None:
            outcome, released = stand_down(session, claim, config, called.held_for, now)
            return outcome, (prepared.lane, now) if released else None
        stamp_call_start(session, claim, prepared.provider.name, called.started_at)
        return record_outcome(
            session,
            config,
            claim,
            called.result,
            prepared.counts,
            now,
            prepared.lane,
            credentials_version=prepared.credentials_version,
            expires_at=prepared.expires_at,
        )


def record_expired(session: Session, claim: Claim, prepared: Prepared, now: datetime) -> str:
    """No call: the message expired between its claim and its call. Fenced on the claim
    like any outcome; its attempt row finished `expired`."""
    error = expired_error(prepared.expires_at)
    finish_attempt(session, claim, now, EXPIRED, error=error, unmarked_only=True)
    unknown, rate_limited, had_unknown = prepared.counts
    transition = record_failed(
        session,
        claim,
        now,
        failure_class=EXPIRED,
        error=error,
        unknown_attempts=unknown,
        rate_limited_attempts=rate_limited,
        had_unknown=had_unknown,
    )
    if not transition.applied:
        return "expired before the call, not recorded: the lease was taken over"
    return "failed: expired (before the call)"


Recorded = tuple[Called, str, tuple[str, datetime] | None]
_ACCEPTED: tuple[str, None] = ("accepted (sent)", None)  # as `record_outcome` says it


def _key(called: Called) -> tuple[int, int, int]:
    claim = called.prepared.claim
    return claim.message_id, claim.cycle, claim.attempt


def _acceptance(called: Called) -> Acceptance | None:
    """The usual answer, an acceptance, for `accept_many`; not the watermarked providers'
    (their call start is stamped too: the general way, `stamp_call_start`)."""
    result, claim = called.result, called.prepared.claim
    if called.expired or called.started_at is None or result is None or not result.accepted:
        return None
    if called.prepared.provider.name in WATERMARKED or result.provider_message_id is None:
        return None
    unknown_attempts, _, had_unknown = called.prepared.counts
    return Acceptance(
        claim.message_id,
        claim.cycle,
        claim.attempt,
        claim.identity_id,
        result.provider_message_id,
        result.http_status,
        result.response_body,
        unknown_attempts,
        had_unknown,
    )


def record_batch(
    db: Database, config: Config, calls: Sequence[Called], clock: Callable[[], datetime]
) -> list[Recorded]:
    """The ends of many calls recorded in one transaction, so a worker's PostgreSQL
    connections stay at one per drain whatever its calls in flight; each write fenced as
    ever. On a connection pinged first, however recently used: one whose path died silently
    during the calls would make accepted sends unknown outcomes. Should the batch fail, each
    is recorded again in a transaction of its own, so one bad record loses no other: each
    is tried, and only when none could be recorded does the first error escape (the
    database is gone: the drain stops). A record that fails alone is logged; its lease
    lapses, an unknown outcome, as the lease rule says."""
    if not calls:
        return []
    try:
        with db.transaction(ping=True) as session:
            now = clock()
            moved = accept_many(session, [a for c in calls if (a := _acceptance(c))], now)
            return [
                (c, *(_ACCEPTED if _key(c) in moved else record_called(session, config, c, now)))
                for c in calls
            ]
    except SQLAlchemyError as exc:
        if len(calls) == 1:
            raise
        log.warning("a batch of %d records failed (%s): one at a time", len(calls), exc)
    recorded: list[Recorded] = []
    errors: list[SQLAlchemyError] = []
    for called in calls:
        try:
            with db.transaction(ping=True) as session:
                recorded.append((called, *record_called(session, config, called, clock())))
        except SQLAlchemyError as exc:
            errors.append(exc)
            log.error(
                "message %s attempt %s: its answer could not be recorded (%s): its lease lapses",
                called.prepared.claim.message_id,
                called.prepared.claim.attempt,
                exc.__class__.__name__,
            )
    if errors and not recorded:
        raise errors[0]
    return recorded


def call_and_record(
    db: Database,
    config: Config,
    prepared: Prepared,
    clock: Callable[[], datetime],
    monotonic: Callable[[], float] = time.monotonic,
) -> tuple[str, tuple[str, datetime] | None]:
    """One message's call and its record (`send_one`); a drain records its calls in
    batches (`record_batch`)."""
    [(_, outcome, next_ring)] = record_batch(
        db, config, [call(config, prepared, monotonic, clock)], clock
    )
    return outcome, next_ring


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


def latest_end(config: Config, claimed_mono: float) -> float:
    """The monotonic instant a call must have ended by, whenever it starts: the check
    above's own bound (a call begun at the latest start ends here), so a pause between the
    check and the call shortens the call instead of carrying it past the lease."""
    return claimed_mono + config.lease_seconds - config.lease_margin


def stand_down(
    session: Session, claim: Claim, config: Config, held_for: float, now: datetime
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


def give_back(db: Database, calls: Sequence[Prepared], now: datetime, why: str) -> int:
    """Attempts claimed and prepared whose call never began (a drain cut short: the
    database or Redis went away, or the job's time ran out) are given back as never sent:
    due again now, their lease cleared, counted against no cap (`release_unsent`), each
    with an event saying why. Left to their lease, each came back as a lost lease: an
    unknown outcome that waited the webhook grace and counted toward `exhausted`, for a
    message no request ever carried. Best effort: without the database they still lapse.
    Returns how many were given back."""
    if not calls:
        return 0
    released = 0
    try:
        with db.transaction() as session:
            for prepared in calls:
                claim = prepared.claim
                mine = release_unsent(session, claim, now)
                released += mine
                note_worker_event(
                    session,
                    claim.message_id,
                    claim.cycle,
                    "stood_down",
                    now,
                    {"attempt": claim.attempt, "why": why, "released": mine},
                )
    except SQLAlchemyError as exc:
        log.warning(
            "%d calls abandoned before they began could not be given back (%s): their leases lapse",
            len(calls),
            exc.__class__.__name__,
        )
        return 0
    log.warning("%d calls abandoned before they began were given back unsent: %s", released, why)
    return released
