"""The provider accepted: its id and `sent`, recorded under the attempt's fence, and the
statuses that arrived before the id applied in the same transaction (`apply_parked`).

    record_accepted         the general way, under the message row's lock
    accept_at_once          the usual case in one statement on PostgreSQL
    record_late_acceptance  an acceptance whose fence no longer holds (lease lost)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, func, insert, literal, or_, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Refusal, Source, Status
from app.models import Attempt, Message, MessageEvent
from app.repo.attempts import fenced
from app.repo.claims import Claim
from app.repo.events import append_event
from app.repo.sql import DriverStatement, is_postgresql, keyed, still_null
from app.repo.status_apply import apply_parked
from app.repo.status_match import record_double_send
from app.repo.transitions import Transition, apply_status

_attempts = cast(Table, Attempt.__table__)


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
        select(Message.status, Message.provider_message_id)
        .where(*fenced(claim))
        .with_for_update(key_share=True)
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
        .with_for_update(key_share=True)
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
