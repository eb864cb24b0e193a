"""The worker's writes: the fenced claim, the attempt rows, and each outcome's fenced record.

Every write after the claim carries `AND attempt = :mine AND cycle = :cycle`, so a worker
whose lease expired cannot overwrite the attempt that re-claimed the message.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, exists, func, insert, literal, or_, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Refusal, Source, Status
from app.models import Attempt, Identity, Message, MessageEvent
from app.providers.dead_letter_order import rank_of
from app.repo.claims import Claim
from app.repo.events import append_event, note_worker_event
from app.repo.identities import get_identity, is_stale_for, pause_identity
from app.repo.sql import DriverStatement, is_postgresql, keyed, rows_changed, still_null
from app.repo.status_apply import apply_parked
from app.repo.status_match import record_double_send
from app.repo.transitions import Transition, apply_status

_attempts = cast(Table, Attempt.__table__)


def take_verdict(session: Session, message_id: int, now: datetime) -> Transition | None:
    """Record the verdict a message owes once its grace wait is over (no provider call).

    The last unknown outcome of a cycle is not failed at once: like every unknown it
    waits the webhook grace, because the provider may have the message and say so. If a
    webhook moved it meanwhile there is nothing to do; otherwise the verdict (`exhausted`)
    is recorded now, fenced on the attempt that earned it: a verdict, not an attempt.
    """
    row = session.execute(
        select(
            Message.status,
            Message.cycle,
            Message.attempt,
            Message.pending_verdict,
            Message.next_attempt_at,
            Message.last_error,
            Identity.provider,
        )
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.id == message_id)
    ).first()
    if row is None or row.pending_verdict is None or row.status != Status.SENDING.value:
        return None
    if row.next_attempt_at is not None and row.next_attempt_at > now:
        return None
    error = row.last_error or {}
    return apply_status(
        session,
        message_id,
        Status.FAILED,
        Source.WORKER,
        now,
        cycle=row.cycle,
        attempt=row.attempt,
        kind="failed",
        detail={"failure_class": row.pending_verdict, "error": row.last_error, "verdict": True},
        extra_values={
            "failure_class": row.pending_verdict,
            "pending_verdict": None,
            "next_attempt_at": None,
            "lease_until": None,
            "dead_letter_rank": rank_of(row.provider, row.pending_verdict, error.get("code")),
        },
    )


def start_attempt(
    session: Session,
    claim: Claim,
    provider_key: str,
    now: datetime,
    *,
    rows: list[dict[str, Any]] | None = None,
) -> None:
    """The attempt's row, written now; given `rows`, its values are added to them instead,
    for `insert_attempts` to write a batch's rows in one INSERT (a drain's claim)."""
    values = {
        "message_id": claim.message_id,
        "cycle": claim.cycle,
        "number": claim.attempt,
        "provider_key": provider_key,
        "started_at": now,
    }
    if rows is not None:
        rows.append(values)
        return
    session.add(Attempt(**values))
    session.flush()


def insert_attempts(session: Session, rows: list[dict[str, Any]]) -> None:
    """The attempt rows `start_attempt` gathered, in one INSERT and without ORM objects
    (the unit of work's flush of a batch's rows cost a fifteenth of a drain's CPU)."""
    if rows:
        session.execute(insert(_attempts), rows)


def finish_attempt(
    session: Session,
    claim: Claim,
    now: datetime,
    outcome: str,
    *,
    http_status: int | None = None,
    provider_message_id: str | None = None,
    error: dict[str, Any] | None = None,
    response_body: str | None = None,
    unmarked_only: bool = False,
) -> None:
    """The claim's attempt row finished with its outcome; `unmarked_only`: unless it has
    one already (a re-claim's `mark_lost_attempt`)."""
    row = [
        Attempt.message_id == claim.message_id,
        Attempt.cycle == claim.cycle,
        Attempt.number == claim.attempt,
    ]
    if unmarked_only:
        row.append(Attempt.outcome.is_(None))
    session.execute(
        update(Attempt)
        .where(*row)
        .values(
            finished_at=now,
            outcome=outcome,
            http_status=http_status,
            provider_message_id=provider_message_id,
            error=error,
            response_body=response_body,
        )
    )


def release_unsent(session: Session, claim: Claim, now: datetime) -> bool:
    """An attempt that made no call gives its message back: due again now, its lease
    cleared, the attempt counted against no cap (no request left, so no outcome to wait
    for), and its attempt row finished `stood_down`. Fenced on the attempt and cycle, and
    on `sending`: a worker whose lease was re-claimed meanwhile (or whose message an
    earlier attempt's webhook moved on) changes nothing. False: it was not ours to give."""
    # Unless a re-claim already marked it unknown (`mark_lost_attempt`): that stays.
    finish_attempt(session, claim, now, "stood_down", unmarked_only=True)
    changed = rows_changed(
        session,
        update(Message)
        .where(*fenced(claim), keyed(Message.status == Status.SENDING.value))
        .values(next_attempt_at=now, lease_until=None),
    )
    return changed == 1


def mark_lost_attempt(session: Session, claim: Claim, now: datetime) -> None:
    """The attempt before a lease-expired re-claim never reported: its outcome is unknown."""
    session.execute(
        update(Attempt)
        .where(
            Attempt.message_id == claim.message_id,
            Attempt.cycle == claim.cycle,
            Attempt.number == claim.attempt - 1,
            Attempt.finished_at.is_(None),
        )
        .values(outcome="unknown", error={"message": "the worker's lease expired mid-call"})
    )


def fenced(claim: Claim) -> list[Any]:
    return [
        Message.id == claim.message_id,
        Message.cycle == claim.cycle,
        Message.attempt == claim.attempt,
    ]


def record_accepted(
    session: Session,
    claim: Claim,
    provider_message_id: str,
    now: datetime,
    *,
    unknown_attempts: int,
    had_unknown: bool,
) -> Transition | None:
    """The provider accepted: keep its id, move to `sent`, apply statuses that came early.

    Returns None when the write is stale (our lease was taken over): nothing is changed.
    """
    current = session.execute(
        select(Message.status, Message.provider_message_id).where(*fenced(claim)).with_for_update()
    ).first()
    if current is None:
        return None
    if current.provider_message_id not in (None, provider_message_id):
        record_double_send(
            session,
            claim.message_id,
            claim.cycle,
            current.provider_message_id,
            provider_message_id,
            now,
        )
    values: dict[str, Any] = {
        "provider_message_id": current.provider_message_id or provider_message_id,
        "lease_until": None,
        "unknown_attempts": unknown_attempts,
    }
    if had_unknown:
        values["had_unknown_outcome"] = True
    status = Status(current.status)
    if status is Status.SENDING:
        # The usual case, under the row lock: the values ride on the move to `sent`, and a
        # retry's class no longer describes the message.
        values["failure_class"] = None
        extra: dict[str, Any] | None = values
    else:
        # A webhook got further (or failed it): keep the id, leave the state and its class.
        session.execute(update(Message).where(*fenced(claim)).values(**values))
        extra = None
    transition = apply_status(
        session,
        claim.message_id,
        Status.SENT,
        Source.WORKER,
        now,
        cycle=claim.cycle,
        attempt=claim.attempt,
        kind="accepted",
        detail={"provider_message_id": provider_message_id},
        extra_values=extra,
        known=(status, claim.cycle, claim.attempt),
    )
    if extra is not None and not transition.applied:
        session.execute(update(Message).where(*fenced(claim)).values(**values))
    apply_parked(session, claim.identity_id, provider_message_id, now)
    return transition


_messages = cast(Table, Message.__table__)
_events = cast(Table, MessageEvent.__table__)
_ACCEPT: dict[bool, DriverStatement] = {}


def _accept_statement(had_unknown: bool) -> DriverStatement:
    """PostgreSQL: the attempt's answer, the move `sending -> sent` with its values and its
    event, in one statement of data-modifying CTEs, built once per shape with bound
    parameters; it returns whether the move applied. It is exactly what
    `record_accepted`'s usual case writes, fenced the same way: on anything unusual (a
    webhook got further, another id, a lost lease) it writes nothing and the caller takes
    the general path.

    The attempt's row is written only with the move (its WHERE reads `moved`): that makes
    the lock order the reconciler's and the claim's, the message row first, by data
    dependency rather than by the order PostgreSQL happens to run sub-statements in (which
    it does not promise). A re-claim holding the message row while it marks our attempt
    unknown then never deadlocks with this statement.

    Whether statuses are parked for the id is not asked here: a subquery reads the
    statement's snapshot, taken before the UPDATE may have waited for the row lock, so a
    status that parked and committed during that wait would be missed (left to the
    sweeper). `accept_at_once` asks in a statement of its own, under the lock."""
    cached = _ACCEPT.get(had_unknown)
    if cached is not None:
        return cached
    # One parameter object per name, typed like its column (`now` goes through the UTC type).
    now = bindparam("p_now", type_=_messages.c.sent_at.type)
    pmid = bindparam("p_pmid", type_=_messages.c.provider_message_id.type)
    mid = bindparam("p_id", type_=_messages.c.id.type)
    cycle = bindparam("p_cycle", type_=_messages.c.cycle.type)
    attempt = bindparam("p_attempt", type_=_messages.c.attempt.type)
    mine = [_messages.c.id == mid, _messages.c.cycle == cycle, _messages.c.attempt == attempt]
    values: dict[str, Any] = {
        "status": Status.SENT.value,
        "sent_at": func.coalesce(_messages.c.sent_at, now),
        "provider_message_id": pmid,
        "lease_until": None,
        "unknown_attempts": bindparam("p_unknown_attempts"),
        "failure_class": None,
    }
    if had_unknown:
        values["had_unknown_outcome"] = True
    moved = (
        update(_messages)
        .where(
            *mine,
            keyed(_messages.c.status == Status.SENDING.value),
            or_(
                still_null(_messages.c.provider_message_id),
                _messages.c.provider_message_id == pmid,
            ),
        )
        .values(values)
        .returning(_messages.c.id, _messages.c.cycle)
        .cte("moved")
    )
    finished = (
        update(_attempts)
        .where(
            _attempts.c.message_id == mid,
            _attempts.c.cycle == cycle,
            _attempts.c.number == attempt,
            exists(select(moved.c.id)),
        )
        .values(
            finished_at=now,
            outcome="accepted",
            http_status=bindparam("p_http_status", type_=_attempts.c.http_status.type),
            provider_message_id=pmid,
            error=bindparam("p_error", type_=_attempts.c.error.type),
            response_body=bindparam("p_response_body", type_=_attempts.c.response_body.type),
        )
        .returning(_attempts.c.id)
        .cte("finished")
    )
    logged = (
        insert(_events)
        .from_select(
            [
                "message_id",
                "cycle",
                "source",
                "kind",
                "from_status",
                "to_status",
                "applied",
                "received_at",
                "detail",
            ],
            select(
                moved.c.id,
                moved.c.cycle,
                literal(Source.WORKER.value),
                literal("accepted"),
                literal(Status.SENDING.value),
                literal(Status.SENT.value),
                literal(True),
                now,
                bindparam("p_detail", type_=_events.c.detail.type),
            ),
        )
        .returning(_events.c.id)
        .cte("logged")
    )
    statement = (
        select(select(func.count()).select_from(moved).scalar_subquery().label("moved"))
        .add_cte(finished)
        .add_cte(logged)
    )
    # Compiled once: its cache key (a walk of the three CTEs) is not redone per send.
    driver = _ACCEPT[had_unknown] = DriverStatement(statement)
    return driver


def accept_at_once(
    session: Session,
    claim: Claim,
    provider_message_id: str,
    now: datetime,
    *,
    http_status: int | None,
    response_body: str | None,
    unknown_attempts: int,
    had_unknown: bool,
) -> Transition | None:
    """The usual acceptance in one statement on PostgreSQL (see `_accept_statement`),
    then the statuses parked for the id, looked up under the row lock the statement took
    (as `record_accepted` does); None when it did not apply (or on SQLite): then
    `finish_attempt` and `record_accepted` record it, as they always did."""
    if not is_postgresql(session):
        return None
    row = (
        _accept_statement(had_unknown)
        .execute(
            session,
            {
                "p_id": claim.message_id,
                "p_cycle": claim.cycle,
                "p_attempt": claim.attempt,
                "p_now": now,
                "p_pmid": provider_message_id,
                "p_http_status": http_status,
                "p_response_body": response_body,
                "p_error": None,
                "p_unknown_attempts": unknown_attempts,
                "p_detail": {"provider_message_id": provider_message_id},
            },
        )
        .one()
    )
    if row.moved != 1:
        return None
    apply_parked(session, claim.identity_id, provider_message_id, now)
    return Transition(True, Status.SENDING, Status.SENT)


def record_late_acceptance(
    session: Session, claim: Claim, provider_message_id: str, now: datetime
) -> Transition | None:
    """The provider accepted an attempt whose fence no longer holds (its lease expired and
    the message was re-claimed). The acceptance is still a fact about this cycle: the
    provider has the message, so no retry may send it again. Record the id and `sent`
    unless the row knows another id already (then the provider has it twice: flagged).
    None if the message has moved to a new cycle since (the attempt row keeps the id)."""
    row = session.execute(
        select(Message.cycle, Message.provider_message_id)
        .where(Message.id == claim.message_id)
        .with_for_update()
    ).first()
    if row is None:
        return None
    if row.cycle != claim.cycle:
        # Requeued since: the acceptance still goes in its own cycle's log, and if the new
        # cycle is at the provider too, the customer may have it twice: flagged.
        append_event(
            session,
            message_id=claim.message_id,
            cycle=claim.cycle,
            source=Source.WORKER.value,
            kind="accepted",
            received_at=now,
            applied=False,
            to_status=Status.SENT.value,
            refusal=Refusal.STALE.value,
            detail={"provider_message_id": provider_message_id, "late": True},
        )
        if row.provider_message_id not in (None, provider_message_id):
            record_double_send(
                session,
                claim.message_id,
                row.cycle,
                row.provider_message_id,
                provider_message_id,
                now,
            )
        return None
    if row.provider_message_id not in (None, provider_message_id):
        record_double_send(
            session,
            claim.message_id,
            claim.cycle,
            row.provider_message_id,
            provider_message_id,
            now,
        )
        return None
    session.execute(
        update(Message)
        .where(
            Message.id == claim.message_id,
            Message.cycle == claim.cycle,
            still_null(Message.provider_message_id),
        )
        .values(provider_message_id=provider_message_id)
    )
    transition = apply_status(
        session,
        claim.message_id,
        Status.SENT,
        Source.WORKER,
        now,
        cycle=claim.cycle,
        kind="accepted",
        detail={"provider_message_id": provider_message_id, "late": True, "attempt": claim.attempt},
        extra_values={"next_attempt_at": None, "pending_verdict": None, "failure_class": None},
    )
    apply_parked(session, claim.identity_id, provider_message_id, now)
    return transition


def _outcome_values(
    failure_class: str,
    error: dict[str, Any] | None,
    unknown_attempts: int,
    rate_limited_attempts: int,
    had_unknown: bool,
) -> dict[str, Any]:
    """What every recorded failure writes: its class, the verbatim error, the counters."""
    values: dict[str, Any] = {
        "failure_class": failure_class,
        "last_error": error,
        "lease_until": None,
        "unknown_attempts": unknown_attempts,
        "rate_limited_attempts": rate_limited_attempts,
    }
    if had_unknown:
        values["had_unknown_outcome"] = True  # never reset within a cycle
    return values


def record_retry(
    session: Session,
    claim: Claim,
    at: datetime,
    *,
    failure_class: str,
    error: dict[str, Any] | None,
    unknown_attempts: int,
    rate_limited_attempts: int,
    had_unknown: bool,
    verdict: str | None = None,
) -> bool:
    """Stay `sending` until `at`; with a `verdict`, what to record then instead of sending."""
    values = _outcome_values(
        failure_class, error, unknown_attempts, rate_limited_attempts, had_unknown
    )
    values["next_attempt_at"] = at
    values["pending_verdict"] = verdict
    # Rung for that time (RQ's scheduler); the sweeper re-rings only if it stays due.
    values["rung_at"] = at
    return (
        rows_changed(
            session,
            update(Message)
            .where(*fenced(claim), keyed(Message.status == Status.SENDING.value))
            .values(**values),
        )
        == 1
    )


def record_failed(
    session: Session,
    claim: Claim,
    now: datetime,
    *,
    failure_class: str,
    error: dict[str, Any] | None,
    unknown_attempts: int,
    rate_limited_attempts: int,
    had_unknown: bool,
) -> Transition:
    extra = _outcome_values(
        failure_class, error, unknown_attempts, rate_limited_attempts, had_unknown
    )
    extra["next_attempt_at"] = None
    extra["pending_verdict"] = None
    provider = session.scalar(select(Identity.provider).where(Identity.id == claim.identity_id))
    extra["dead_letter_rank"] = rank_of(provider or "", failure_class, (error or {}).get("code"))
    return apply_status(
        session,
        claim.message_id,
        Status.FAILED,
        Source.WORKER,
        now,
        cycle=claim.cycle,
        attempt=claim.attempt,
        kind="failed",
        detail={"failure_class": failure_class, "error": error},
        extra_values=extra,
    )


class Hold(StrEnum):
    HELD = "held"  # the identity is paused; the message waits with no next attempt
    STALE = "stale"  # the answer was given to credentials since replaced: due again now
    NOT_RECORDED = "not_recorded"  # fenced off: a webhook got further, or a re-claim


def record_held(
    session: Session,
    claim: Claim,
    now: datetime,
    *,
    error: dict[str, Any] | None,
    reason: str,
    credentials_version: int | None = None,
) -> Hold:
    """The sender is broken: pause its identity; the message waits with no next attempt.

    Unless the identity was resumed or given new credentials after this attempt's claim:
    then the answer is stale (the old token's), the identity stays active, and the
    message is due again at once. The attempt is not counted either way.
    """
    paused = pause_identity(
        session,
        claim.identity_id,
        reason,
        now,
        unless_changed_since=claim.claimed_at,
        credentials_version=credentials_version,
    )
    identity = None if paused else get_identity(session, claim.identity_id)
    if identity is not None and is_stale_for(identity, claim.claimed_at, credentials_version):
        retried = rows_changed(
            session,
            update(Message)
            .where(*fenced(claim), keyed(Message.status == Status.SENDING.value))
            .values(next_attempt_at=now, lease_until=None, rung_at=now),
        )
        if retried != 1:
            return Hold.NOT_RECORDED
        note_worker_event(
            session,
            claim.message_id,
            claim.cycle,
            "stale_sender_broken",
            now,
            {
                "reason": reason,
                "error": error,
                "why": "the identity was resumed or given new credentials after this attempt "
                "was claimed; the answer was the old credentials'",
            },
        )
        return Hold.STALE
    held = (
        rows_changed(
            session,
            update(Message)
            .where(*fenced(claim), keyed(Message.status == Status.SENDING.value))
            .values(
                next_attempt_at=None,
                lease_until=None,
                failure_class="sender_broken",
                last_error=error,
            ),
        )
        == 1
    )
    if not held:
        return Hold.NOT_RECORDED
    note_worker_event(
        session, claim.message_id, claim.cycle, "held", now, {"reason": reason, "error": error}
    )
    return Hold.HELD


def release_held(session: Session, identity_id: int, now: datetime) -> list[tuple[int, str]]:
    """After a resume: every message the pause held, due at once. Returns (id, lane) to ring."""
    waiting = select(Message.id, Message.lane).where(
        Message.identity_id == identity_id,
        or_(
            Message.status == Status.QUEUED.value,
            and_(
                Message.status == Status.SENDING.value,
                Message.next_attempt_at.is_(None),
                Message.lease_until.is_(None),
            ),
        ),
    )
    rows = [(row.id, row.lane) for row in session.execute(waiting)]
    session.execute(
        update(Message)
        .where(
            Message.identity_id == identity_id,
            Message.status == Status.SENDING.value,
            Message.next_attempt_at.is_(None),
            Message.lease_until.is_(None),
        )
        .values(next_attempt_at=now)
    )
    return rows
