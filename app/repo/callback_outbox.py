"""The status callbacks' outbox: what is due, claiming it, recording each POST, replays.

Rows are written by the database in the transaction of each applied change (migration
0016). Delivery is at least once: a row is claimed under a lease (its `next_attempt_at`
moved past the POST's deadline, and its `attempts` bumped), posted, and its outcome
recorded fenced on that attempt number. A worker killed between the POST and the record
leaves the row due again when the lease ends; the repeat carries the same `webhook-id`,
which the receiver deduplicates on. A message's callbacks go out one at a time per
endpoint and URL, in sequence order: a later one waits while an earlier one is pending.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, case, exists, func, insert, select, tuple_, update
from sqlalchemy.orm import Session, aliased

from app.callback_models import (
    DELIVERED,
    GAVE_UP,
    PENDING,
    Callback,
    CallbackAttempt,
    CallbackEndpoint,
)
from app.models import Tenant
from app.repo.sql import rows_changed

# Backoff between attempts: 5 s doubling to at most an hour, each stretched by up to 30%
# at random so a receiver coming back is not met by every retry at once (docs/callbacks.md).
BACKOFF_FIRST, BACKOFF_MAX, JITTER = 5.0, 3600.0, 0.3
# A Retry-After longer than this is not waited for in full.
RETRY_AFTER_MAX = 6 * 3600.0
# What is kept of a receiver's answer, for the dashboard.
KEPT_BODY_CHARS = 1024


def backoff(attempts: int, rng: random.Random | None = None) -> timedelta:
    base = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(attempts - 1, 0))
    return timedelta(seconds=base * (1 + (rng or random).uniform(0, JITTER)))


@dataclass(frozen=True, slots=True)
class Claimed:
    id: int
    message_id: int
    sequence: int
    event: str
    payload: dict[str, Any]
    url: str | None
    attempt: int  # this POST's number (the fence of its record)
    created_at: datetime

    @property
    def webhook_id(self) -> str:
        return f"cb_{self.id}"


def endpoints_with_due(session: Session, now: datetime) -> list[int]:
    """Enabled endpoints with a callback due now (what the sweeper rings)."""
    due = exists().where(
        Callback.endpoint_id == CallbackEndpoint.id,
        Callback.state == PENDING,
        Callback.next_attempt_at <= now,
    )
    query = select(CallbackEndpoint.id).where(CallbackEndpoint.enabled, due)
    return list(session.scalars(query.order_by(CallbackEndpoint.id)))


def claim_due(
    session: Session, endpoint_id: int, now: datetime, limit: int, lease: timedelta
) -> list[Claimed]:
    """Up to `limit` due callbacks of an enabled endpoint, oldest first, each the earliest
    pending one of its message (and URL), leased until `now + lease`."""
    earlier = aliased(Callback)
    blocked = exists().where(
        earlier.endpoint_id == Callback.endpoint_id,
        earlier.message_id == Callback.message_id,
        earlier.url.is_not_distinct_from(Callback.url),
        earlier.state == PENDING,
        earlier.sequence < Callback.sequence,
    )
    query = (
        select(Callback)
        .join(CallbackEndpoint, CallbackEndpoint.id == Callback.endpoint_id)
        .where(
            Callback.endpoint_id == endpoint_id,
            CallbackEndpoint.enabled,
            Callback.state == PENDING,
            Callback.next_attempt_at <= now,
            ~blocked,
        )
        .order_by(Callback.id)
        .limit(limit)
        .with_for_update(of=Callback, skip_locked=True)
    )
    rows = list(session.scalars(query))
    claimed = []
    for row in rows:
        claimed.append(
            Claimed(
                row.id,
                row.message_id,
                row.sequence,
                row.event,
                row.payload,
                row.url,
                row.attempts + 1,
                min(row.created_at, now),
            )
        )
    if rows:
        session.execute(
            update(Callback)
            .where(Callback.id.in_([row.id for row in rows]))
            .values(
                attempts=Callback.attempts + 1,
                next_attempt_at=now + lease,
                # The retry window runs from the row's writing (the database's clock) or
                # from its first claim when our clock puts that earlier (the two clocks
                # differ): never later than the first POST.
                created_at=func.least(Callback.created_at, now),
            )
            .execution_options(synchronize_session=False)
        )
    return claimed


@dataclass(frozen=True, slots=True)
class Answer:
    """What one POST came to: an HTTP status, or a transport error's words."""

    status: int | None
    latency_ms: int
    body: str | None = None
    error: str | None = None
    retry_after: float | None = None

    @property
    def is_success(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def lock_endpoint(session: Session, endpoint_id: int) -> bool:
    """Before recording answers: the endpoint's row, locked first (False: deleted). A
    delete locks it, then its callbacks (the cascade); a record that locked callbacks
    first, then the endpoint to count its failures, deadlocked with it."""
    query = (
        select(CallbackEndpoint.id)
        .where(CallbackEndpoint.id == endpoint_id)
        .with_for_update(key_share=True)
    )
    return session.scalar(query) is not None


@dataclass(frozen=True, slots=True)
class Recorded:
    stale: bool  # a re-claim took the row over: this record changed nothing
    disabled: str | None = None  # the endpoint was disabled by this answer: why


def record_answer(
    session: Session,
    callback: Claimed,
    endpoint_id: int,
    answer: Answer,
    now: datetime,
    *,
    retry_window: timedelta,
    disable_after: int,
    rng: random.Random | None = None,
) -> Recorded:
    """1. The callback: delivered on 2xx; else due again after backoff (or Retry-After), or
       given up once the retry window since the change has passed. Fenced on the attempt
       (and so on the row still being there: its endpoint may have been deleted).
    2. Keep the attempt (status, latency, the body cut, escaped when shown).
    3. The endpoint: a 2xx ends its run of failures; a 410 disables it ("gone"); the
       `disable_after`-th failure in a row disables it ("failing")."""
    fence = [Callback.id == callback.id, Callback.attempts == callback.attempt]
    values: dict[str, Any] = {"last_status": answer.status, "last_error": answer.error}
    if answer.is_success:
        values.update(state=DELIVERED, delivered_at=now)
    else:
        wait = backoff(callback.attempt, rng)
        if answer.retry_after is not None:
            wait = max(wait, timedelta(seconds=min(answer.retry_after, RETRY_AFTER_MAX)))
        if now + wait > callback.created_at + retry_window:
            values["state"] = GAVE_UP
        else:
            values["next_attempt_at"] = now + wait
    changed = rows_changed(
        session,
        update(Callback)
        .where(*fence, Callback.state == PENDING)
        .values(**values)
        .execution_options(synchronize_session=False),
    )
    if changed != 1:
        # Taken over by a re-claim, or deleted with its endpoint meanwhile: nothing kept.
        return Recorded(stale=True)
    body = answer.body[:KEPT_BODY_CHARS] if answer.body is not None else None
    session.add(
        CallbackAttempt(
            callback_id=callback.id,
            endpoint_id=endpoint_id,
            attempted_at=now,
            http_status=answer.status,
            latency_ms=answer.latency_ms,
            response_body=body,
            error=answer.error,
        )
    )
    return Recorded(False, _note_endpoint(session, endpoint_id, answer, now, disable_after))


def record_delivered(
    session: Session, endpoint_id: int, delivered: list[tuple[Claimed, Answer]], now: datetime
) -> int:
    """The 2xx answers of a drain's step, in three statements whatever their number: the
    callbacks delivered (each fenced on its attempt, as `record_answer` does), their attempt
    rows, and the endpoint's run of failures ended. Returns how many were recorded."""
    if not delivered:
        return 0
    statuses = {callback.id: answer.status for callback, answer in delivered}
    fence = [(callback.id, callback.attempt) for callback, _ in delivered]
    changed = set(
        session.scalars(
            update(Callback)
            .where(tuple_(Callback.id, Callback.attempts).in_(fence), Callback.state == PENDING)
            .values(
                state=DELIVERED,
                delivered_at=now,
                last_status=case(statuses, value=Callback.id),
                last_error=None,
            )
            .returning(Callback.id)
            .execution_options(synchronize_session=False)
        )
    )
    if not changed:
        return 0
    session.execute(
        insert(CallbackAttempt),
        [
            {
                "callback_id": callback.id,
                "endpoint_id": endpoint_id,
                "attempted_at": now,
                "http_status": answer.status,
                "latency_ms": answer.latency_ms,
                "response_body": answer.body[:KEPT_BODY_CHARS] if answer.body else answer.body,
                "error": None,
            }
            for callback, answer in delivered
            if callback.id in changed
        ],
    )
    _end_failure_run(session, endpoint_id)
    return len(changed)


def _end_failure_run(session: Session, endpoint_id: int) -> None:
    session.execute(
        update(CallbackEndpoint)
        .where(CallbackEndpoint.id == endpoint_id, CallbackEndpoint.failures_in_row != 0)
        .values(failures_in_row=0)
        .execution_options(synchronize_session=False)
    )


def _note_endpoint(
    session: Session, endpoint_id: int, answer: Answer, now: datetime, disable_after: int
) -> str | None:
    endpoints = cast(Table, CallbackEndpoint.__table__)
    if answer.is_success:
        _end_failure_run(session, endpoint_id)
        return None
    failures = session.execute(
        update(endpoints)
        .where(endpoints.c.id == endpoint_id)
        .values(failures_in_row=endpoints.c.failures_in_row + 1)
        .returning(endpoints.c.failures_in_row, endpoints.c.enabled)
    ).one()
    reason = None
    if answer.status == 410:
        reason = "gone: the receiver answered 410"
    elif failures.failures_in_row >= disable_after:
        reason = f"failing: {failures.failures_in_row} attempts failed in a row"
    if reason is None or not failures.enabled:
        return None
    session.execute(
        update(CallbackEndpoint)
        .where(CallbackEndpoint.id == endpoint_id)
        .values(enabled=False, disabled_reason=reason, disabled_at=now)
        .execution_options(synchronize_session=False)
    )
    return reason


def replay_callback(
    session: Session, tenant_id: int | None, callback_id: int, now: datetime
) -> bool:
    """Post one callback again (delivered or given up), under its own `webhook-id`."""
    query = update(Callback).where(Callback.id == callback_id)
    if tenant_id is not None:
        mine = select(CallbackEndpoint.id).where(CallbackEndpoint.tenant_id == tenant_id)
        query = query.where(Callback.endpoint_id.in_(mine))
    return (
        rows_changed(
            session,
            query.values(state=PENDING, next_attempt_at=now, delivered_at=None).execution_options(
                synchronize_session=False
            ),
        )
        == 1
    )


def replay_since(session: Session, endpoint_id: int, since: datetime, now: datetime) -> int:
    """Post again every callback of the endpoint from changes at or after `since`."""
    return rows_changed(
        session,
        update(Callback)
        .where(Callback.endpoint_id == endpoint_id, Callback.created_at >= since)
        .values(state=PENDING, next_attempt_at=now, delivered_at=None)
        .execution_options(synchronize_session=False),
    )


def message_callbacks(session: Session, message_id: int) -> list[Callback]:
    query = select(Callback).where(Callback.message_id == message_id)
    return list(session.scalars(query.order_by(Callback.sequence, Callback.id)))


def recent_attempts(session: Session, endpoint_id: int, limit: int = 20) -> list[Any]:
    """The endpoint's last POSTs, newest first, with the callback each carried."""
    query = (
        select(CallbackAttempt, Callback.event, Callback.message_id, Callback.sequence)
        .join(Callback, Callback.id == CallbackAttempt.callback_id)
        .where(CallbackAttempt.endpoint_id == endpoint_id)
        .order_by(CallbackAttempt.id.desc())
        .limit(limit)
    )
    return list(session.execute(query))


@dataclass(frozen=True, slots=True)
class Backlog:
    """Per endpoint: callbacks pending, the oldest pending one's change time, and its run
    of failures (the metrics)."""

    endpoint_id: int
    tenant: str
    pending: int
    oldest: datetime | None
    failures_in_row: int
    enabled: bool


def backlogs(session: Session) -> list[Backlog]:
    pending = (
        select(
            Callback.endpoint_id,
            func.count().label("pending"),
            func.min(Callback.created_at).label("oldest"),
        )
        .where(Callback.state == PENDING)
        .group_by(Callback.endpoint_id)
        .subquery()
    )
    query = (
        select(
            CallbackEndpoint.id,
            Tenant.name,
            func.coalesce(pending.c.pending, 0),
            pending.c.oldest,
            CallbackEndpoint.failures_in_row,
            CallbackEndpoint.enabled,
        )
        .join(Tenant, Tenant.id == CallbackEndpoint.tenant_id)
        .outerjoin(pending, pending.c.endpoint_id == CallbackEndpoint.id)
        .order_by(CallbackEndpoint.id)
    )
    return [Backlog(*row) for row in session.execute(query)]
