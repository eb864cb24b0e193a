"""The reconciler: one provider status, from the webhook view to the state machine, in one file.

Read it top-down; the steps come in the order DESIGN section 6 lists them.

    watermark_statuses  (Messenger, Instagram) a watermark becomes one status per covered
                        message, under its provider id, before anything is stored (1c)
    record_delivery     the raw delivery, its statuses and inbound windows, one commit
    apply_recorded      each status in its own transaction (a failure: the sweeper replays)
      apply_stored_status
        1. match        by provider id; by our correlation id; (by watermark); by an attempt
        2. adopt        this cycle's provider id onto the message; two ids: a double send
        3. claim        the status row, so two appliers cannot both apply it (in a
                        transaction of its own: one compare-and-set with step 6)
        4. park         no message yet (or none with an attempt in that cycle), or stale:
                        an earlier cycle's id, recorded on its own cycle and not applied
        5. apply        through the guard: `apply_status`, which asks `app/lifecycle.py`
        6. record       the status row's result
    apply_parked        the worker recording a provider id applies what arrived before it

Every webhook view (WhatsApp, Twilio, Messenger and Instagram) verifies the
delivery, turns its statuses into `IncomingStatus` values, and calls `record_delivery` in
the transaction that found its identities, then `apply_recorded`, both on the request's one
connection (`request_db`); if the database refuses the statuses, `keep_raw_delivery` keeps
the raw delivery alone. The sweeper replays unapplied statuses through `apply_webhook_status`.

On PostgreSQL the common case takes a shorter road with the same steps
(`app/repo/webhook_sql.py`): one status of a known number is recorded with its raw delivery
in one statement, and a status whose provider id names a message is applied (1a, 3, 5 and 6)
in one more, each committed by itself (no BEGIN, no COMMIT); anything else, or a status
that statement finds no message for, goes step by step in transactions.

Lock order, everywhere: the message row first, then the status row. The worker that
records a provider id holds the message row and then applies the parked statuses; a status
matched here locks the message row (step 1) before claiming itself (step 3). So the two
cannot deadlock, and with the sweeper retrying parked statuses, cannot miss each other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from app.db import Database
from app.late_statuses import note_refusal
from app.lifecycle import ACCEPTED_WORDS, PROVIDER_WORDS, Source, Status
from app.providers.base import Watermark
from app.providers.dead_letter_order import rank_of
from app.repo.events import append_event
from app.repo.inbox import (
    IncomingStatus,
    Result,
    StatusTakenError,
    StoredStatus,
    claim_and_finish_status,
    claim_status,
    finish_status,
    load_status,
    parked_status_ids,
    store_delivery,
    store_new_statuses,
)
from app.repo.matching import (
    LockedMessage,
    lock_message_by_attempt,
    lock_message_by_provider_id,
    lock_message_of_identity,
    record_provider_id,
)
from app.repo.messages import parse_correlation_id
from app.repo.sql import is_postgresql
from app.repo.transitions import Transition, apply_status
from app.repo.watermarks import messages_under_watermark
from app.repo.webhook_sql import record_one_status
from app.repo.webhook_sql_apply import apply_by_provider_id
from app.repo.windows import open_window

log = logging.getLogger(__name__)


# The entry points for the webhook views --------------------------------------------


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A customer wrote in: it opens or extends their 24-hour window on that identity."""

    identity_id: int
    sender: str
    provider_time: datetime


@dataclass(slots=True)
class Recorded:
    """What `record_delivery` stored: the statuses to apply, and what it counted."""

    delivery_id: int
    to_apply: list[StoredStatus] = field(default_factory=list)
    duplicates: int = 0
    unmatched: int = 0  # under a number we do not know: stored finished


@dataclass(frozen=True, slots=True)
class RawDelivery:
    """A verified delivery as it is stored: who sent it, and exactly what they sent."""

    provider: str
    identity_id: int | None
    headers: dict[str, str]
    body: str
    now: datetime


# What the database says about the values it was given (too long, not valid JSON, a NUL,
# a constraint): storing them again would fail again. Anything else (OperationalError:
# the connection lost, a deadlock, a statement timeout; InterfaceError; InternalError) is
# about the database, not the delivery.
REFUSALS = (DataError, IntegrityError)


class StatusesRefusedError(Exception):
    """The database refused a delivery's statuses: the caller's transaction is spoiled.
    Roll it back and keep the raw delivery alone: `keep_raw_delivery(db, error)`."""

    def __init__(self, reason: str, delivery: RawDelivery) -> None:
        super().__init__(reason)
        self.delivery = delivery


def keep_raw_delivery(db: Database, refused: StatusesRefusedError) -> int:
    """The raw delivery whose statuses the database refused, kept on its own in a
    transaction of its own (so nothing a provider signed is lost); returns its id. The
    caller still answers 2xx, or the provider would redeliver it for ever; a person reads
    the statuses from the raw body."""
    raw = refused.delivery
    with db.transaction() as session:
        kept = record_delivery(
            session,
            provider=raw.provider,
            identity_id=raw.identity_id,
            headers=raw.headers,
            body=raw.body,
            now=raw.now,
        )
    log.error(
        "%s delivery %s kept, statuses not stored: %s", raw.provider, kept.delivery_id, refused
    )
    return kept.delivery_id


def record_delivery(
    session: Session,
    *,
    provider: str,
    identity_id: int | None,
    headers: dict[str, str],
    body: str,
    now: datetime,
    statuses: Sequence[IncomingStatus] = (),
    inbound: Iterable[InboundMessage] = (),
) -> Recorded:
    """Keep a verified delivery: the raw body, its statuses (unapplied, deduplicated by key)
    and the windows its inbound messages open, committed with the caller's transaction.

    If the database refuses the statuses (a value no real provider sends), this raises
    `StatusesRefusedError`: the caller rolls back and stores the raw delivery on its own
    (`keep_raw_delivery`), so it is kept either way. Only a refusal of the values does
    (`REFUSALS`): a lost connection, a deadlock or a timeout says nothing about them, and
    propagates, so the delivery goes unacknowledged and the provider sends it again (kept
    raw and answered 2xx, its statuses would never be stored or applied).
    (Optimistic, instead of a savepoint around the statuses: the savepoint cost every
    delivery two statements to cover what almost never happens.) On PostgreSQL, one status
    of a known number and nothing else (WhatsApp's usual delivery) is stored with its raw
    delivery in one statement.
    """
    inbound = list(inbound)
    if recorded_in_one_statement(statuses, inbound) and is_postgresql(session):
        # The common case, one status of a known number: one statement on PostgreSQL.
        raw = RawDelivery(provider, identity_id, headers, body, now)
        recorded = record_single_status(session, raw, statuses[0])
        assert recorded is not None  # unchecked: it always stores
        return recorded
    delivery_id = store_delivery(session, provider, identity_id, headers, body, now)
    recorded = Recorded(delivery_id)
    if not statuses and not inbound:
        return recorded
    try:
        to_apply, duplicates = store_new_statuses(session, delivery_id, list(statuses), now)
        # Sorted for the reason the statuses are: one lock order for every delivery.
        for item in sorted(inbound, key=lambda item: (item.identity_id, item.sender)):
            open_window(session, item.identity_id, item.sender, item.provider_time)
    except REFUSALS as exc:
        raw = RawDelivery(provider, identity_id, headers, body, now)
        raise StatusesRefusedError(_reason(exc), raw) from exc
    recorded.to_apply = to_apply
    recorded.duplicates = duplicates
    recorded.unmatched = len(statuses) - duplicates - len(to_apply)
    return recorded


def record_single_status(
    session: Session | Connection,
    raw: RawDelivery,
    status: IncomingStatus,
    still_sealed: tuple[int, str] | None = None,
) -> Recorded | None:
    """`record_delivery` of a delivery that is one status of a known number and nothing
    else, in one statement (PostgreSQL), so it may run as a transaction of its own
    (`Database.autocommit`). Raises `StatusesRefusedError` as `record_delivery` does.
    With `still_sealed` (the identity and the sealed secret the delivery was verified
    with), nothing is stored, and None returned, if the identity's secret has changed."""
    try:
        done = record_one_status(
            session,
            provider=raw.provider,
            identity_id=raw.identity_id,
            headers=raw.headers,
            body=raw.body,
            now=raw.now,
            status=status,
            still_sealed=still_sealed,
        )
    except REFUSALS as exc:
        raise StatusesRefusedError(_reason(exc), raw) from exc
    if done is None:
        return None
    delivery_id, stored = done
    if stored is None:
        return Recorded(delivery_id, duplicates=1)
    return Recorded(delivery_id, to_apply=[stored])


def recorded_in_one_statement(
    statuses: Sequence[IncomingStatus], inbound: Sequence[InboundMessage]
) -> bool:
    """A delivery `record_delivery` stores in one statement on PostgreSQL (so it may run
    as a transaction of its own, `Database.autocommit`): one status of a known number and
    nothing else, WhatsApp's usual delivery."""
    return len(statuses) == 1 and not inbound and statuses[0].identity_id is not None


def _reason(exc: DBAPIError) -> str:
    return str(exc.orig) if exc.orig else str(exc)


def apply_recorded(db: Database, recorded: Recorded, now: datetime) -> dict[str, int]:
    """Apply each recorded status in its own transaction; counts by result.

    A status that fails to apply stays unapplied (counted `unapplied`): the sweeper
    replays it. Duplicates and unmatched statuses of the delivery are counted too.
    """
    counts: dict[str, int] = {Result.DUPLICATE: recorded.duplicates}
    if recorded.unmatched:
        counts[Result.UNMATCHED] = recorded.unmatched
    for status in recorded.to_apply:
        try:
            result = apply_on_its_own(db, status, now)
        except StatusTakenError:
            result = Result.DUPLICATE  # another applier finished it first; ours rolled back
        except Exception:
            log.exception(
                "status %s could not be applied now; the sweeper will replay it", status.id
            )
            result = "unapplied"
        counts[result] = counts.get(result, 0) + 1
    return counts


def apply_on_its_own(db: Database, status: StoredStatus, now: datetime) -> str:
    """One stored status in a transaction of its own (the caller counts `StatusTakenError`).

    On PostgreSQL a status that moves a message and names a provider id is first tried as
    the one statement (`apply_matched_by_provider_id`), committed by itself with no BEGIN
    or COMMIT around it; it undoes itself where it must not stand. Where it finds no
    message, nothing was written, and the steps run in a transaction.
    """
    if db.postgresql and one_statement_applies(status):
        with db.autocommit() as connection:
            done = apply_matched_by_provider_id(connection, status, now)
        if done is not None:
            return done
    with db.transaction() as session:
        return apply_stored_status(session, status, now, own_transaction=True)


def apply_webhook_status(session: Session, status_id: int, now: datetime) -> str:
    """Apply one stored status by its id (the sweeper's replay, the parked statuses)."""
    status = load_status(session, status_id)
    if status is None:
        return Result.DUPLICATE  # gone, or finished by another applier
    return apply_stored_status(session, status, now)


# One status ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Match:
    """The message a status applies to, locked, in the cycle the status belongs to."""

    message: LockedMessage
    cycle: int


@dataclass(frozen=True, slots=True)
class Stale:
    """The status names an earlier cycle of this message: recorded there, not applied."""

    message_id: int


def apply_stored_status(
    session: Session, status: StoredStatus, now: datetime, *, own_transaction: bool = False
) -> str:
    """Match one stored status to its message and apply it; returns a `Result` word.

    With `own_transaction` (the transaction holds nothing but this status, and the caller
    rolls it back on `StatusTakenError`), the claim (3) rides on the record (6) as one
    compare-and-set; otherwise (the worker applying parked statuses inside its own work,
    the sweeper) the status row is claimed first, so nothing is done twice.
    """

    def record(applied_at: datetime | None, result: str, message_id: int | None) -> str:
        if not own_transaction:
            finish_status(session, status.id, applied_at, result, message_id)
        elif not claim_and_finish_status(session, status.id, applied_at, result, message_id):
            raise StatusTakenError(status.id)
        return result

    if status.identity_id is None:
        # A number we do not know: nothing of ours can match it (stored finished already;
        # this covers a row from before they were).
        if own_transaction or claim_status(session, status.id):
            return record(now, Result.UNMATCHED, None)
        return Result.UNMATCHED

    found = match(session, status, now)  # 1 and 2: locks the message, adopts the id
    if not own_transaction and not claim_status(session, status.id):  # 3
        return Result.DUPLICATE
    if found is None:  # 4: parked, for the worker or the sweeper to apply later
        return record(None, Result.PARKED, None)
    if isinstance(found, Stale):
        return record(now, Result.STALE, found.message_id)
    target = PROVIDER_WORDS.get(status.status)
    if (
        target is None
        and status.status in ACCEPTED_WORDS
        and found.message.status is Status.SENDING
    ):
        # Twilio has the message (its answer to us was lost or is late): our `sent`, so
        # no retry sends a second copy.
        target = Status.SENT
    if target is None:  # below `sent` (Twilio's queued, ...) or untracked: recorded only
        return record(now, Result.IGNORED, found.message.id)
    transition = apply_through_guard(session, status, found, target, now)  # 5
    note_refusal(transition, found.message.id, status.provider)
    return record(now, result_of(transition), found.message.id)  # 6


def one_statement_applies(status: StoredStatus) -> bool:
    """The status moves a message and names a provider id of a known identity."""
    return (
        status.status in PROVIDER_WORDS
        and status.identity_id is not None
        and status.provider_message_id is not None
    )


def apply_matched_by_provider_id(
    session: Session | Connection, status: StoredStatus, now: datetime
) -> str | None:
    """Steps 1a, 3, 5 and 6 in one statement on PostgreSQL, for a status (in a transaction
    of its own, or as one) for which `one_statement_applies`: None (nothing done) when no
    message of its identity has the id, and the caller goes step by step. Raises
    `StatusTakenError` as `record` does, with everything the statement did undone."""
    target = PROVIDER_WORDS[status.status]
    detail, extra = guard_values(status, target)
    done = apply_by_provider_id(session, status, target, now, detail=detail, extra_values=extra)
    if done is None:
        return None
    transition = Transition(
        done.applied, done.from_status, target, done.refusal, duplicate=done.duplicate
    )
    note_refusal(transition, done.message_id, status.provider)
    return result_of(transition)


# 1. Match ---------------------------------------------------------------------------


def match(session: Session, status: StoredStatus, now: datetime) -> Match | Stale | None:
    """The message this status is about, locked; None to park it.

    a. By the provider's message id, within the delivering identity.
    b. By our correlation id (the message id and cycle, keyed): this cycle's status
       adopts its provider id; an earlier cycle's is stale; a cycle with no attempt yet
       cannot have anything at the provider, so the status parks.
    c. By watermark (Messenger, Instagram): expanded before storing, by
       `watermark_statuses`, into statuses that match by id (a).
    d. By an attempt that recorded the provider id: an earlier cycle's (stale), or this
       cycle's from an attempt whose lease was lost before it wrote the id (adopted).
    """
    assert status.identity_id is not None
    if status.provider_message_id is not None:
        message = lock_message_by_provider_id(
            session, status.identity_id, status.provider_message_id
        )
        if message is not None:
            return Match(message, message.cycle)

    parsed = parse_correlation_id(session, status.correlation_id)
    if parsed is not None:
        message_id, cycle = parsed
        # Locks the row: a worker recording the provider id right now finishes first.
        message = lock_message_of_identity(session, message_id, status.identity_id)
        if message is not None and cycle == message.cycle:
            if message.attempt == 0:
                # No attempt in this cycle: nothing of ours can be at the provider, so no
                # provider can report on it. Parked: if an attempt later records this
                # provider id, the status applies then.
                return None
            adopt(session, message, status, now)
            return Match(message, cycle)
        if message is not None and cycle < message.cycle:
            record_stale(session, message, cycle, status, now)
            return Stale(message.id)

    if status.provider_message_id is None:
        return None
    by_attempt = lock_message_by_attempt(session, status.identity_id, status.provider_message_id)
    if by_attempt is None:
        return None
    cycle, message = by_attempt
    if cycle < message.cycle:
        record_stale(session, message, cycle, status, now)
        return Stale(message.id)
    adopt(session, message, status, now)
    return Match(message, cycle)


def watermark_statuses(
    session: Session, provider: str, watermarks: list[Watermark], ids: dict[str, int]
) -> list[IncomingStatus]:
    """Step 1c, for Messenger's `message_deliveries` without `mids` and its `message_reads`
    (Instagram's `messaging_seen`): each watermark says "every message of this thread
    (the Page or account, and the PSID / IGSID) sent at or before this instant". It runs
    before the statuses are stored, in `record_delivery`'s transaction: each covered
    message becomes one ordinary status under its provider id, so it is stored, deduped
    (a later per-mid receipt for it is a duplicate) and matched by id (1a), and the guard
    decides as ever: a watermark never moves a message backwards, nor another thread's.
    Watermarks under identities we do not know match nothing; their raw delivery is kept."""
    found: list[IncomingStatus] = []
    for mark in watermarks:
        identity_id = ids.get(mark.routing_id)
        target = PROVIDER_WORDS.get(mark.status)
        if identity_id is None or target is None:
            continue
        for covered in messages_under_watermark(
            session, identity_id, mark.recipient, mark.watermark_ms, target
        ):
            found.append(
                IncomingStatus(
                    identity_id=identity_id,
                    routing_id=mark.routing_id,
                    provider=provider,
                    provider_message_id=covered.provider_message_id,
                    status=mark.status,
                    provider_time=mark.provider_time,
                    raw={"watermark": mark.watermark_ms, "event": mark.raw},
                )
            )
    return found


# 2. Adopt ---------------------------------------------------------------------------


def adopt(session: Session, message: LockedMessage, status: StoredStatus, now: datetime) -> None:
    """This cycle's status names a provider id: record it if none is known yet; a second,
    different id for the same cycle means the provider holds the message twice."""
    if status.provider_message_id is None:
        return
    if message.provider_message_id is None:
        record_provider_id(
            session, message.id, message.cycle, status.provider_message_id, status.provider_time
        )
    elif message.provider_message_id != status.provider_message_id:
        record_double_send(
            session,
            message.id,
            message.cycle,
            message.provider_message_id,
            status.provider_message_id,
            now,
        )


def record_double_send(
    session: Session,
    message_id: int,
    cycle: int,
    first_id: str | None,
    second_id: str | None,
    now: datetime,
) -> None:
    """Two provider ids for one correlation id and cycle: the provider has it twice."""
    log.error(
        "DOUBLE SEND: message %s cycle %s has provider ids %s and %s",
        message_id,
        cycle,
        first_id,
        second_id,
    )
    append_event(
        session,
        message_id=message_id,
        cycle=cycle,
        source=Source.WEBHOOK.value,
        kind="double_send",
        received_at=now,
        applied=False,
        detail={"provider_message_ids": [first_id, second_id]},
        dedupe_key=f"double_send:{message_id}:{cycle}:{second_id}",
    )


# 4. Stale: recorded on the earlier cycle, never applied ------------------------------


def record_stale(
    session: Session, message: LockedMessage, cycle: int, status: StoredStatus, now: datetime
) -> None:
    """An earlier cycle's status: the guard's cycle fence refuses it, and the event log
    keeps it on that cycle (a requeue reads it to see whether the provider holds a copy)."""
    target = PROVIDER_WORDS.get(status.status)
    if target is None:
        return
    apply_status(
        session,
        message.id,
        target,
        Source.WEBHOOK,
        now,
        provider_time=status.provider_time,
        cycle=cycle,
        dedupe_key=status.dedupe_key,
        detail={
            "provider_message_id": status.provider_message_id,
            "status": status.status,
            "why": "the provider id belongs to an earlier cycle",
        },
        known=message.state,
    )


# 5. Apply through the guard ---------------------------------------------------------


def apply_through_guard(
    session: Session, status: StoredStatus, found: Match, target: Status, now: datetime
) -> Transition:
    """One compare-and-set through the state machine, deduplicated by the status's key
    (the same provider, provider id and status seen again adds no event)."""
    detail, extra = guard_values(status, target)
    return apply_status(
        session,
        found.message.id,
        target,
        Source.WEBHOOK,
        now,
        provider_time=status.provider_time,
        cycle=found.cycle,
        kind=target.value,
        detail=detail,
        dedupe_key=status.dedupe_key,
        extra_values=extra,
        known=found.message.state,
    )


def guard_values(status: StoredStatus, target: Status) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the event's detail, the columns an applied move also writes) for a status."""
    payload = status.payload or {}
    errors = payload.get("errors") or []
    if target is Status.FAILED:
        no_reason = {"provider": status.provider, "message": "failed, no reason given"}
        last_error = errors[0] if errors else no_reason
        failure_class = payload.get("failure_class") or "needs_human"
        extra: dict[str, Any] = {
            "last_error": last_error,
            "failure_class": failure_class,
            "dead_letter_rank": rank_of(status.provider, failure_class, last_error.get("code")),
            "next_attempt_at": None,
            "pending_verdict": None,
            # The lease stays: a retry may still be in flight, and a requeue must wait for it.
        }
    else:
        # The provider has it: no verdict is owed, and a retry's class no longer describes it.
        extra = {"pending_verdict": None, "failure_class": None}
    detail = {
        "provider": status.provider,
        "provider_message_id": status.provider_message_id,
        "status": status.status,
        "errors": errors,
    }
    return detail, extra


# 6. Record --------------------------------------------------------------------------


def result_of(transition: Transition) -> str:
    if transition.duplicate:
        return Result.DUPLICATE
    return Result.APPLIED if transition.applied else Result.REFUSED


# The worker's side: statuses that beat the send response ----------------------------


def apply_parked(
    session: Session, identity_id: int, provider_message_id: str, now: datetime
) -> list[str]:
    """Apply the statuses that arrived before the provider id was recorded.

    Called in the transaction that records the id, so the two cannot miss each other.
    """
    return [
        apply_webhook_status(session, status_id, now)
        for status_id in parked_status_ids(session, identity_id, provider_message_id)
    ]
