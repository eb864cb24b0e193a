"""Messages: reading them, and moving them through the state machine in SQL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, literal, select, update
from sqlalchemy.orm import Session

from app.correlation import make_correlation_id
from app.correlation import parse_correlation_id as parse_correlation_id_under
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
from app.repo.sql import insert_ignoring_conflict, keyed, rows_changed, still_null
from app.shards import shard_key_of

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


def get_message(session: Session, message_id: int) -> Message | None:
    return session.get(Message, message_id, populate_existing=True)


def _read_state(session: Session, message_id: int) -> tuple[Status, int, int] | None:
    row = session.execute(
        select(Message.status, Message.cycle, Message.attempt).where(Message.id == message_id)
    ).one_or_none()
    if row is None:
        return None
    return Status(row.status), row.cycle, row.attempt


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
        current, current_cycle, current_attempt = state
        stale = (cycle is not None and cycle != current_cycle) or (
            attempt is not None and attempt != current_attempt
        )
        decision = (
            Decision(False, current, target, Refusal.STALE)
            if stale
            else decide(source, current, target)
        )
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
    current, current_cycle, current_attempt = known
    stale = (cycle is not None and cycle != current_cycle) or (
        attempt is not None and attempt != current_attempt
    )
    decision = (
        Decision(False, current, target, Refusal.STALE)
        if stale
        else decide(source, current, target)
    )
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


def _correlation_key(session: Session) -> bytes:
    key = session.info.get("correlation_key")
    if not key:
        raise RuntimeError("this session has no correlation key (build it with Database)")
    return bytes(key)


def correlation_id_for(session: Session, message_id: int, cycle: int) -> str:
    """What we send the provider to find the message again (echoed in its webhooks)."""
    return make_correlation_id(_correlation_key(session), message_id, cycle)


def parse_correlation_id(session: Session, value: str | None) -> tuple[int, int] | None:
    """(message id, cycle) of one of our correlation ids; None for anything else."""
    return parse_correlation_id_under(_correlation_key(session), value)


@dataclass(frozen=True, slots=True)
class NewMessage:
    tenant_id: int
    identity_id: int
    recipient: str
    lane: str
    fingerprint: str
    body_text: str | None = None
    template: dict[str, Any] | None = None
    idempotency_key: str | None = None
    tag: str | None = None  # Messenger / Instagram message tag (HUMAN_AGENT)
    campaign: str | None = None
    not_before: datetime | None = None  # a `send_at` still ahead (`app/schedule.py`)
    expires_at: datetime | None = None


def create_message(session: Session, new: NewMessage, now: datetime) -> tuple[Message, bool]:
    """Insert a queued message; with an idempotency key already used, return that one.

    The partial unique index `(tenant_id, idempotency_key)` decides, never a read first:
    of two concurrent requests with one key exactly one inserts. Returns (message, created).
    """
    values = {
        "tenant_id": new.tenant_id,
        "identity_id": new.identity_id,
        "recipient": new.recipient,
        "lane": new.lane,
        "body_text": new.body_text,
        "template": new.template,
        "template_name": (new.template or {}).get("name"),
        "campaign": new.campaign,
        "recipient_tail": new.recipient[-4:],
        "tag": new.tag,
        "idempotency_key": new.idempotency_key,
        "fingerprint": new.fingerprint,
        "not_before": new.not_before,
        "expires_at": new.expires_at,
        "status": Status.QUEUED.value,
        "cycle": 1,
        "provider_key_cycle": 1,
        "attempt": 0,
        "unknown_attempts": 0,
        "rate_limited_attempts": 0,
        "had_unknown_outcome": False,
        "queued_at": now,
        "rung_at": now,
        "created_at": now,
    }
    message_id = insert_ignoring_conflict(
        session,
        Message.__table__,
        values,
        ["tenant_id", "idempotency_key"],
        conflict_where=Message.idempotency_key.is_not(None),
    )
    if message_id is None:
        existing = session.scalars(
            select(Message).where(
                Message.tenant_id == new.tenant_id,
                Message.idempotency_key == new.idempotency_key,
            )
        ).one()
        return existing, False
    session.execute(
        update(Message)
        .where(Message.id == message_id)
        .values(correlation_id=correlation_id_for(session, message_id, 1))
    )
    append_event(
        session,
        message_id=message_id,
        cycle=1,
        source=Source.API.value,
        kind="create",
        received_at=now,
        applied=True,
        to_status=Status.QUEUED.value,
    )
    message = get_message(session, message_id)
    assert message is not None
    return message, True


class RequeueRefusedError(Exception):
    """A requeue that must not happen (not failed, or the provider may hold the message)."""


def requeue_message(
    session: Session,
    message_id: int,
    now: datetime,
    *,
    actor: str,
    force: bool = False,
    reason: str | None = None,
) -> Message:
    """The one backward edge: an operator moves a failed message to `queued`, a new cycle.

    1. Lock the row. The check and the update below then see the same row: a webhook
       that could change the verdict locks it to match its status, so it either
       committed before us (and we see it) or waits for our commit.
    2. Refuse, unless forced with a reason, when the provider may hold a deliverable copy
       (`provider_may_hold`); the refusal names what it found.
    3. If any attempt of the failed cycle had an unknown outcome the provider may hold
       the message, so the new cycle keeps the provider key; after only definite
       rejections it gets the new cycle's key.
    """
    message = session.scalars(
        select(Message)
        .where(Message.id == message_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
    if message is None:
        raise RequeueRefusedError(f"message {message_id} does not exist")
    if message.status != Status.FAILED.value:
        raise RequeueRefusedError(
            f"message {message_id} is {message.status}, not failed; only failed messages "
            "can be requeued"
        )
    if message.lease_until is not None and message.lease_until > now:
        raise RequeueRefusedError(
            f"message {message_id} has an attempt still in flight until "
            f"{message.lease_until:%H:%M:%S} UTC; requeue it after that"
        )
    if message.content_purged_at is not None:
        raise RequeueRefusedError(
            f"message {message_id}'s content was purged on {message.content_purged_at:%Y-%m-%d} "
            "(retention): there is nothing to send; send it again as a new message"
        )
    if force and not reason:
        raise RequeueRefusedError("a forced requeue needs a reason")
    held = provider_may_hold(session, message)
    if held and not force:
        raise RequeueRefusedError(
            f"message {message_id} may already be with the customer: {held}. "
            "Requeueing could text them twice; use --force with --reason to requeue anyway"
        )
    new_cycle = message.cycle + 1
    # The key stays while the provider may hold a copy under it: an unknown outcome in the
    # failed cycle, or a cycle that made no attempt at all (canceled while queued), which
    # still carries the key of the cycle before it.
    keep_key = message.had_unknown_outcome or message.attempt == 0
    key_cycle = message.provider_key_cycle if keep_key else new_cycle
    cleared = {name: None for name in (*TIMESTAMP_FIELD.values(), "not_before", "expires_at")}
    result = apply_status(
        session,
        message_id,
        Status.QUEUED,
        Source.OPERATOR,
        now,
        cycle=message.cycle,
        kind="requeue",
        actor=actor,
        detail={
            "forced": force,
            "reason": reason,
            "held": held,
            "new_cycle": new_cycle,
            "provider_key_cycle": key_cycle,
            "previous_error": message.last_error,
            "previous_failure_class": message.failure_class,
        },
        extra_values={
            **cleared,
            "queued_at": now,
            "cycle": new_cycle,
            "provider_key_cycle": key_cycle,
            # A row older than its shard key (migration 0022 left finished rows at 0) joins
            # its recipient's shard again.
            "shard_key": shard_key_of(message.recipient),
            "correlation_id": correlation_id_for(session, message_id, new_cycle),
            "provider_message_id": None,
            "attempt": 0,
            "unknown_attempts": 0,
            "rate_limited_attempts": 0,
            "had_unknown_outcome": False,
            "request_started_ms": None,
            "next_attempt_at": None,
            "lease_until": None,
            "rung_at": None,
            "failure_class": None,
            "dead_letter_rank": None,
            "pending_verdict": None,
            "last_error": None,
        },
    )
    if not result.applied:
        raise RequeueRefusedError(f"message {message_id} changed while requeueing; try again")
    refreshed = get_message(session, message_id)
    assert refreshed is not None
    return refreshed


def provider_may_hold(session: Session, message: Message) -> str | None:
    """Why the provider may hold a deliverable copy of this message, or None.

    Looked for across every cycle, since a copy an earlier cycle lost track of is just as
    deliverable: a `delivered` or `read` reported for it (applied, refused because it had
    failed, or recorded late for an earlier cycle), or a provider id it was accepted under
    that was never reported `failed` on its own (the second id of a double send is the
    usual case). A copy the provider accepted and then failed (131049, say) is not held.
    """
    from app.repo.holds import holds_for  # the same rule for many messages at once

    return holds_for(session, [message])[message.id]


def mark_unrung(session: Session, message_id: int) -> None:
    """The ring did not reach Redis: let the sweeper's next pass ring it."""
    session.execute(update(Message).where(Message.id == message_id).values(rung_at=None))
