"""A message moved through the state machine in SQL: the compare-and-set every writer uses.

`apply_status` asks `app/lifecycle.py` whether a move is allowed and writes it as one
`UPDATE ... WHERE status = :current`, with its event row; `Transition` says what happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, literal, select, update
from sqlalchemy.orm import Session

from app.lifecycle import (
    TIMESTAMP_FIELD,
    Decision,
    Refusal,
    Source,
    Status,
    decide,
)
from app.models import Message, MessageEvent
from app.repo.events import append_event
from app.repo.sql import keyed, rows_changed, still_null

_messages = cast(Table, Message.__table__)

# A compare-and-set that lost a race is retried after re-reading; the state only moves
# forward, so a handful of rounds always settles.
_MAX_ROUNDS = 8


@dataclass(frozen=True, slots=True)
class Transition:
    """What happened to a requested move."""

    applied: bool
    from_status: Status | None
    to_status: Status
    refusal: Refusal | None = None
    duplicate: bool = False


def _read_state(session: Session, message_id: int) -> tuple[Status, int, int] | None:
    row = session.execute(
        select(Message.status, Message.cycle, Message.attempt).where(Message.id == message_id)
    ).one_or_none()
    if row is None:
        return None
    return Status(row.status), row.cycle, row.attempt


def _decide(
    source: Source,
    target: Status,
    state: tuple[Status, int, int],
    cycle: int | None,
    attempt: int | None,
) -> Decision:
    """The caller's fence first (a cycle or attempt that is no longer the message's is
    stale), then the state machine."""
    current, current_cycle, current_attempt = state
    if (cycle is not None and cycle != current_cycle) or (
        attempt is not None and attempt != current_attempt
    ):
        return Decision(False, current, target, Refusal.STALE)
    return decide(source, current, target)


def apply_status(
    session: Session,
    message_id: int,
    target: Status,
    source: Source,
    now: datetime,
    *,
    provider_time: datetime | None = None,
    cycle: int | None = None,
    attempt: int | None = None,
    kind: str | None = None,
    actor: str | None = None,
    detail: dict[str, Any] | None = None,
    dedupe_key: str | None = None,
    extra_values: dict[str, Any] | None = None,
    known: tuple[Status, int, int] | None = None,
) -> Transition:
    """Move a message to `target` if the state machine allows it, as a compare-and-set.

    `known` is (status, cycle, attempt) when the caller has just read them under a row
    lock: then they are not read again.

    1. The event row is appended first; with a `dedupe_key` already recorded (the same
       provider, provider message id and status seen again) nothing else happens.
    2. The current state is read and the state machine decides. `cycle` and `attempt`
       fence the write: a worker whose attempt was taken over, or a status for an
       earlier cycle, changes nothing.
    3. An allowed move is one `UPDATE ... WHERE status = :current`; if another writer got
       there first, re-read and decide again.
    4. The event row records the outcome, applied or refused. `extra_values` are written
       only with an applied move. Timestamps come from the provider's clock where there
       is one, else ours, and fill only an empty column.
    """
    when = provider_time or now
    stamp = TIMESTAMP_FIELD[target]
    state = known or _read_state(session, message_id)
    if state is None:
        return Transition(False, None, target, Refusal.NOT_ALLOWED)
    event: dict[str, Any] = {
        "message_id": message_id,
        # The event belongs to the cycle the caller fenced on (a stale status: its own).
        "cycle": cycle if cycle is not None else state[1],
        "source": source.value,
        "kind": kind or target.value,
        "received_at": now,
        "to_status": target.value,
        "provider_time": provider_time,
        "actor": actor,
        "detail": detail,
    }
    if known is not None and dedupe_key is not None:
        return _apply_known(
            session,
            message_id,
            target,
            source,
            known,
            event,
            dedupe_key,
            stamp,
            when,
            cycle=cycle,
            attempt=attempt,
            extra_values=extra_values,
        )
    event_id: int | None = None
    if dedupe_key is not None:
        # Deduplicated events go in first: the same status seen again stops here.
        event_id = append_event(session, applied=False, dedupe_key=dedupe_key, **event)
        if event_id is None:
            return Transition(False, state[0], target, Refusal.SAME, duplicate=True)

    def record(result: Transition) -> Transition:
        # An event with no dedupe key is written once, with its outcome.
        if event_id is None:
            append_event(
                session,
                applied=result.applied,
                from_status=result.from_status.value if result.from_status else None,
                refusal=result.refusal.value if result.refusal else None,
                flush=False,
                **event,
            )
        else:
            _record(session, event_id, result)
        return result

    for _ in range(_MAX_ROUNDS):
        current, current_cycle, _ = state
        decision = _decide(source, target, state, cycle, attempt)
        if not decision.applies:
            if decision.fills_own_timestamp:
                _fill_timestamp(session, message_id, current_cycle, stamp, when)
            return record(Transition(False, current, target, decision.refusal))

        column = getattr(Message, stamp)
        values: dict[str, Any] = {
            "status": target.value,
            stamp: func.coalesce(column, literal(when, column.type)),
            **(extra_values or {}),
        }
        guard = [
            Message.id == message_id,
            keyed(Message.status == current.value),
            Message.cycle == current_cycle,
        ]
        if attempt is not None:
            guard.append(Message.attempt == attempt)
        changed = rows_changed(
            session,
            update(Message)
            .where(*guard)
            .values(**values)
            .execution_options(synchronize_session=False),
        )
        if changed == 1:
            return record(Transition(True, current, target))
        # Nothing updated: another writer moved it between our read and our write.
        state = _read_state(session, message_id)
        if state is None:
            return Transition(False, None, target, Refusal.NOT_ALLOWED)
    raise RuntimeError(f"message {message_id}: state kept changing under apply_status")


def _apply_known(
    session: Session,
    message_id: int,
    target: Status,
    source: Source,
    known: tuple[Status, int, int],
    event: dict[str, Any],
    dedupe_key: str,
    stamp: str,
    when: datetime,
    *,
    cycle: int | None,
    attempt: int | None,
    extra_values: dict[str, Any] | None,
) -> Transition:
    """`apply_status` for a state read under the row lock: the decision cannot change, so
    it is made first and the event goes in once with its outcome (the reconciler's path).

    1. Decide (the caller's fence first, then the state machine).
    2. Insert the event with the outcome; the dedupe key already recorded: a duplicate,
       nothing else happens.
    3. Apply the move (one guarded UPDATE, which must change the locked row), or fill the
       own timestamp of a late status.
    """
    current, current_cycle, _ = known
    decision = _decide(source, target, known, cycle, attempt)
    event_id = append_event(
        session,
        applied=decision.applies,
        from_status=current.value,
        refusal=decision.refusal.value if decision.refusal else None,
        dedupe_key=dedupe_key,
        **event,
    )
    if event_id is None:
        return Transition(False, current, target, Refusal.SAME, duplicate=True)
    if not decision.applies:
        if decision.fills_own_timestamp:
            _fill_timestamp(session, message_id, current_cycle, stamp, when)
        return Transition(False, current, target, decision.refusal)
    extra = extra_values or {}
    params = {f"v_{name}": value for name, value in extra.items()}
    params.update(
        g_id=message_id,
        g_status=current.value,
        g_cycle=current_cycle,
        to_status=target.value,
        when=when,
    )
    if attempt is not None:
        params["g_attempt"] = attempt
    changed = rows_changed(
        session, _guarded_update(stamp, tuple(extra), attempt is not None), params
    )
    if changed != 1:
        # The caller said it holds the row lock; a row that moved anyway is a bug, and
        # rolling back (the status stays unapplied, the sweeper replays it) is the safe end.
        raise RuntimeError(f"message {message_id} changed under its lock")
    return Transition(True, current, target)


# (timestamp column, extra columns, fenced on the attempt) -> the guarded UPDATE.
_GUARDED: dict[tuple[str, tuple[str, ...], bool], Any] = {}


def _guarded_update(stamp: str, extra: tuple[str, ...], fence_attempt: bool) -> Any:
    """`UPDATE messages SET status, <stamp> (if empty), <extra> WHERE id AND status AND
    cycle [AND attempt]`, with bound parameters, built once per shape: building it per
    status cost more CPU than its round trip."""
    key = (stamp, extra, fence_attempt)
    statement = _GUARDED.get(key)
    if statement is None:
        column = _messages.c[stamp]
        guard = [
            _messages.c.id == bindparam("g_id"),
            keyed(_messages.c.status == bindparam("g_status")),
            _messages.c.cycle == bindparam("g_cycle"),
        ]
        if fence_attempt:
            guard.append(_messages.c.attempt == bindparam("g_attempt"))
        values: dict[str, Any] = {
            "status": bindparam("to_status"),
            stamp: func.coalesce(column, bindparam("when", type_=column.type)),
        }
        values.update(
            {name: bindparam(f"v_{name}", type_=_messages.c[name].type) for name in extra}
        )
        statement = update(_messages).where(*guard).values(values)
        _GUARDED[key] = statement
    return statement


def _fill_timestamp(
    session: Session, message_id: int, cycle: int, stamp: str, when: datetime
) -> None:
    column = getattr(Message, stamp)
    session.execute(
        update(Message)
        .where(Message.id == message_id, Message.cycle == cycle, still_null(column))
        .values({stamp: when})
        .execution_options(synchronize_session=False)
    )


def _record(session: Session, event_id: int, result: Transition) -> None:
    session.execute(
        update(MessageEvent)
        .where(MessageEvent.id == event_id)
        .values(
            applied=result.applied,
            from_status=result.from_status.value if result.from_status else None,
            refusal=result.refusal.value if result.refusal else None,
        )
        .execution_options(synchronize_session=False)
    )
