"""Claim and prepare: the first half of the send path (docs/design.md section 7).

The send path reads top-down in three modules:
1. Claim (here, and `app/repo/claims.py`): take due messages in one fenced update, each
   the next of its conversation, and prepare each attempt inside the claim's transaction:
   its attempt row, its provider key and correlation id, the identity's credentials.
2. Call (`jobs/call.py`): the provider, outside any transaction, within the lease.
3. Record (`jobs/record.py`): the answer through the state machine, with fenced writes.

A drain (`jobs/drain.py`) runs them for a batch; `send_one` runs them for one named
message (an operator's tool and the tests'; no job enqueues it: the drains carry every
send, and only their claim keeps each conversation in order).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from app.config import Config
from app.crypto import SecretBox
from app.db import Database
from app.models import Identity, Message
from app.providers import PROVIDERS, get_provider
from app.providers.base import Credentials, FailureClass, OutboundMessage
from app.repo.attempts import insert_attempts, mark_lost_attempt, start_attempt
from app.repo.claims import Claim, claim_message
from app.repo.due import due_again_at
from app.repo.failures import record_retry, take_verdict
from app.repo.identities import get_identity, pause_identity, reveal_secrets, token_problem
from app.repo.messages import get_message
from app.retry import Step, plan_after_failure
from jobs.call import Prepared, call_and_record

log = logging.getLogger(__name__)


LOST_LEASE_ERROR = {
    "provider": None,
    "message": "the worker's lease expired before it recorded an answer; outcome unknown",
}


def provider_key_for(message_id: int, key_cycle: int, fingerprint: str) -> str:
    """Stable for an intent (message and key cycle), derived, never random."""
    material = f"ratchet:{message_id}:{key_cycle}:{fingerprint}"
    return hashlib.sha256(material.encode()).hexdigest()[:40]


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


def send_one(
    db: Database,
    box: SecretBox,
    config: Config,
    message_id: int,
    clock: Callable[[], datetime],
    monotonic: Callable[[], float] = time.monotonic,
) -> tuple[str, tuple[str, datetime] | None]:
    """Claim, call, record. Returns (outcome word, (lane, time) of the next ring or None).

    The message named, without the conversation rule (`app/repo/conversations.py`): no
    queue, view or command calls this; every send goes through a drain's claim, which
    keeps it. It drives one named message in tests and by hand.

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
    message: Message | Row[Any] | None = None,
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
            expires_at=message.expires_at,
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
        expires_at=message.expires_at,
        credentials_version=identity.credentials_version,
    )


# What `prepare` reads of a claimed message.
_PREPARED = (
    Message.id,
    Message.lane,
    Message.recipient,
    Message.body_text,
    Message.template,
    Message.correlation_id,
    Message.tag,
    Message.fingerprint,
    Message.provider_key_cycle,
    Message.unknown_attempts,
    Message.rate_limited_attempts,
    Message.had_unknown_outcome,
    Message.expires_at,
    Message.last_error,
)


def claimed_messages(session: Session, claims: Collection[Claim]) -> dict[int, Row[Any]]:
    """A batch's rows in one read, after its claim wrote them: the columns `prepare`
    reads, as rows, not `Message` objects (building a hundred ORM objects cost about a
    twentieth of a drain's CPU)."""
    ids = [claim.message_id for claim in claims]
    return {row.id: row for row in session.execute(select(*_PREPARED).where(Message.id.in_(ids)))}


def prepare_batch(
    session: Session,
    box: SecretBox,
    config: Config,
    identity: Identity,
    claims: list[Claim],
    claimed_mono: float,
    now: datetime,
) -> tuple[list[Prepared], list[tuple[Claim, str]]]:
    """Inside a drain's claim transaction: each claimed attempt prepared for its call, and
    the outcomes decided without one. The batch's rows are read in one statement, the
    identity's secrets decrypted once, and the attempt rows written in one INSERT."""
    loaded = claimed_messages(session, claims)
    credentials = credentials_for(box, identity, config.public_base_url)
    batch: list[Prepared] = []
    decided: list[tuple[Claim, str]] = []
    attempt_rows: list[dict[str, Any]] = []
    for claim in claims:
        prepared = prepare(
            session,
            box,
            config,
            identity,
            claim,
            claimed_mono,
            now,
            message=loaded[claim.message_id],
            attempt_rows=attempt_rows,
            credentials=credentials,
        )
        if isinstance(prepared, Prepared):
            batch.append(prepared)
        else:
            decided.append((claim, prepared[0]))
    insert_attempts(session, attempt_rows)
    return batch, decided


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
