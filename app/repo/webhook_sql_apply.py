"""The webhook's one-statement apply on PostgreSQL: a status whose provider id names a
message of its identity, applied (steps 1a, 3, 5 and 6 of `app/reconcile.py`) in one
statement of data-modifying CTEs, committed by itself (`Database.autocommit`).

`apply_by_provider_id` locks the message, appends the event with its outcome
(deduplicated by key), applies the move (or fills a late status's own timestamp), and
claims and finishes the status row; where what it did must not stand, it calls
`ratchet_abort` (migration 0010) and PostgreSQL undoes the whole statement. How it keeps
the general path's order and locks: `app/repo/webhook_sql.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Select,
    String,
    Table,
    bindparam,
    case,
    exists,
    func,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.lifecycle import TIMESTAMP_FIELD, Refusal, Source, Status, decide
from app.models import Message, MessageEvent, WebhookStatus
from app.repo.inbox import Result, StatusTakenError, StoredStatus
from app.repo.sql import DriverStatement, still_null, unindexed

_messages = cast(Table, Message.__table__)
_events = cast(Table, MessageEvent.__table__)
_statuses = cast(Table, WebhookStatus.__table__)


def _word(word: str) -> Any:
    """One of our own fixed words (a status, a result) written into the statement: bound
    parameters for constants cost CPU on every execution, for nothing."""
    if not word.replace("_", "").isalpha() or not word.islower():
        raise ValueError(f"not a plain word: {word!r}")
    return literal_column(f"'{word}'", String)


@dataclass(frozen=True, slots=True)
class Applied:
    """What `apply_by_provider_id` did to the message it found and locked."""

    message_id: int
    from_status: Status
    applied: bool
    refusal: Refusal | None
    duplicate: bool  # the event's dedupe key was recorded already: nothing changed


def match_by_provider_id() -> Select[Any]:
    """The message of an identity with a provider id, locked: where applying a status
    starts. Found through the provider id's index, however many messages the identity
    has (see `unindexed`)."""
    return (
        select(_messages.c.id, _messages.c.cycle, _messages.c.status)
        .where(
            unindexed(_messages.c.identity_id) == bindparam("identity_id_"),
            _messages.c.provider_message_id == bindparam("provider_message_id_"),
        )
        # One row, as the step-by-step lookup takes its first: the scalar subqueries of the
        # apply read it. (No ORDER BY: that could lead the planner to walk the primary key.)
        .limit(1)
        .with_for_update(key_share=True)  # `app/repo/matching.py` says why
    )


def _build_apply(target: Status, extra: tuple[str, ...]) -> Any:
    stamp = TIMESTAMP_FIELD[target]
    decisions = {current: decide(Source.WEBHOOK, current, target) for current in Status}
    applies_from = [current.value for current, d in decisions.items() if d.applies]
    refusals = {
        current.value: d.refusal.value for current, d in decisions.items() if d.refusal is not None
    }
    fills = [current.value for current, d in decisions.items() if d.fills_own_timestamp]

    cur = match_by_provider_id().cte("cur")
    event_values = {
        "message_id": cur.c.id,
        "cycle": cur.c.cycle,
        "source": _word(Source.WEBHOOK.value),
        "kind": _word(target.value),
        "from_status": cur.c.status,
        "to_status": _word(target.value),
        "applied": cur.c.status.in_([_word(word) for word in applies_from]),
        "refusal": case(
            *[(cur.c.status == _word(word), _word(why)) for word, why in refusals.items()]
        ),
        "provider_time": bindparam("p_provider_time", type_=_events.c.provider_time.type),
        "received_at": bindparam("now", type_=_events.c.received_at.type),
        "detail": bindparam("p_detail", type_=_events.c.detail.type),
        "dedupe_key": bindparam("p_dedupe_key", type_=_events.c.dedupe_key.type),
    }
    event = (
        pg_insert(_events)
        .from_select(list(event_values), select(*event_values.values()))
        .on_conflict_do_nothing(index_elements=["dedupe_key"])
        .returning(
            _events.c.message_id,
            _events.c.from_status,
            _events.c.applied,
            _events.c.refusal,
        )
        .cte("e")
    )
    # No `status = from_status` guard here, unlike the step-by-step UPDATE: these scan the
    # statement's snapshot, and when `cur` waited for another writer's commit, the row in
    # that snapshot is the older one. A guard on what changed would skip the row before
    # PostgreSQL re-checks it against the newest version (the one `cur` locked and decided
    # on). Matching by id alone, the newest version is the one updated, and it cannot have
    # moved since `cur` locked it.
    guard = (_messages.c.id == event.c.message_id,)
    when = bindparam("when", type_=_messages.c[stamp].type)
    move_values: dict[str, Any] = {
        "status": _word(target.value),
        stamp: func.coalesce(_messages.c[stamp], when),
    }
    move_values.update(
        {name: bindparam(f"v_{name}", type_=_messages.c[name].type) for name in extra}
    )
    moves = [
        update(_messages)
        .where(*guard, event.c.applied)
        .values(move_values)
        .returning(_messages.c.id)
        .cte("m")
    ]
    if fills:
        # A late status still records when it happened, if that is not known yet.
        moves.append(
            update(_messages)
            .where(*guard, event.c.refusal == _word(Refusal.LATE), still_null(_messages.c[stamp]))
            .values({stamp: when})
            .returning(_messages.c.id)
            .cte("f")
        )
    result = func.coalesce(
        select(
            case((event.c.applied, _word(Result.APPLIED)), else_=_word(Result.REFUSED))
        ).scalar_subquery(),
        _word(Result.DUPLICATE),
    )
    finished = (
        update(_statuses)
        .where(
            _statuses.c.id == bindparam("status_id"),
            still_null(_statuses.c.applied_at),
            exists(select(cur.c.id)),
        )
        .values(
            tries=_statuses.c.tries + literal_column("1"),
            applied_at=bindparam("now", type_=_statuses.c.applied_at.type),
            result=result,
            message_id=select(cur.c.id).scalar_subquery(),
        )
        .returning(_statuses.c.id)
        .cte("s")
    )
    counts = [select(func.count()).select_from(move).scalar_subquery() for move in moves]
    moved: Any = counts[0] if len(counts) == 1 else counts[0] + counts[1]
    claimed = select(func.count()).select_from(finished).scalar_subquery()
    # The statement is its own transaction (no BEGIN, no COMMIT around it): where what it
    # did must not stand, it fails itself, and PostgreSQL undoes all of it.
    undo = case(
        (claimed == literal_column("0"), func.ratchet_abort(_word(TAKEN))),
        (event.c.applied & (moved != literal_column("1")), func.ratchet_abort(_word(UNMOVED))),
    )
    return (
        select(
            cur.c.id,
            cur.c.status,
            event.c.applied,
            event.c.refusal,
            event.c.message_id.is_not(None),
            undo,
        )
        .select_from(cur)
        .outerjoin(event, true())
    )


# Why `ratchet_abort` undid an apply: another applier finished the status row first (ours
# must roll back: `StatusTakenError`), or the move changed no row under the lock (a bug).
TAKEN = "taken"
UNMOVED = "unmoved"
ABORT_SQLSTATE = "RA001"

# (target, extra columns) -> the statement, built once per shape.
_APPLY: dict[tuple[Status, tuple[str, ...]], DriverStatement] = {}


def apply_by_provider_id(
    session: Session | Connection,
    status: StoredStatus,
    target: Status,
    now: datetime,
    *,
    detail: dict[str, Any],
    extra_values: dict[str, Any],
) -> Applied | None:
    """Apply a status to the message of its identity that has its provider id, in one
    statement; None (and nothing done) when no message has that id.

    The same as `match` (by provider id), `apply_status(..., known=...)` and
    `claim_and_finish_status` of the general path: an event deduplicated by the status's
    key, written once with its outcome; the move only from a state `decide` allows; the
    status row claimed and finished in the same compare-and-set. Where another applier
    finished the status first, the statement undoes itself and this raises
    `StatusTakenError`; a move that changed no row under the lock undoes it too, and raises
    RuntimeError. So it may run as a transaction of its own (`Database.autocommit`)."""
    assert status.identity_id is not None and status.provider_message_id is not None
    extra = tuple(extra_values)
    statement = _APPLY.get((target, extra))
    if statement is None:
        statement = _APPLY[(target, extra)] = DriverStatement(_build_apply(target, extra))
    params: dict[str, Any] = {f"v_{name}": value for name, value in extra_values.items()}
    params.update(
        identity_id_=status.identity_id,
        provider_message_id_=status.provider_message_id,
        p_provider_time=status.provider_time,
        now=now,
        when=status.provider_time or now,
        p_detail=detail,
        p_dedupe_key=status.dedupe_key,
        status_id=status.id,
    )
    # (No parameter is named after a column: SQLAlchemy would add it to an UPDATE's SET.)
    try:
        row = statement.execute(session, params).first()
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != ABORT_SQLSTATE:
            raise
        if exc.orig.diag.message_primary == f"ratchet: {TAKEN}":  # type: ignore[union-attr]
            raise StatusTakenError(status.id) from exc
        raise RuntimeError(f"status {status.id}: its message changed under its lock") from exc
    if row is None:
        return None
    message_id, from_status, applied, refusal, inserted, _ = row
    if not inserted:
        return Applied(message_id, Status(from_status), False, Refusal.SAME, True)
    return Applied(
        message_id,
        Status(from_status),
        bool(applied),
        Refusal(refusal) if refusal is not None else None,
        False,
    )
