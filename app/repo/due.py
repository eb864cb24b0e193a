"""What a drain asks of its identity and lane before and after it claims: how much is
due, which verdicts are owed, and when something next will be (docs/design.md section 7).

Each reads the waiting rows' indexes in an order one of them gives (`plan_without_sorts`
in `app/repo/claimable.py`), so its cost follows the backlog, not the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from app.config import Config
from app.lifecycle import Status
from app.models import Message
from app.repo.claimable import (
    CLAIM_ORDER,
    claim_parameters,
    claimable,
    claimable_bound,
    plan_without_sorts,
)
from app.repo.shards import in_shard
from app.shards import WHOLE, Shard


def count_due(
    session: Session,
    identity_id: int,
    lane: str,
    now: datetime,
    config: Config,
    blocked: Sequence[str] = (),
    paced: Sequence[str] = (),
    shard: Shard = WHOLE,
) -> int:
    """How many messages of this identity and lane may be claimed now, up to one batch:
    none to a `blocked` recipient, one to each `paced` one (as `claim_batch` takes them),
    and only the next of each conversation; in this drain's `shard` of the lane."""
    hold = timedelta(seconds=config.conversation_hold)
    values = claim_parameters(identity_id, lane, now, hold, shard)
    skip = [*blocked, *paced]
    if skip:
        values["skip"] = skip
    # In the claim's order, so read as the claim reads (see `plan_without_sorts`).
    plan_without_sorts(session)
    counting = _count_read(not shard.is_whole, bool(skip), config.drain_batch)
    count = session.scalar(counting, values) or 0
    if paced:
        due = claimable(identity_id, lane, now, hold, shard)
        count += (
            session.scalar(
                select(func.count(func.distinct(Message.recipient))).where(
                    *due, Message.recipient.in_(paced)
                )
            )
            or 0
        )
    return min(count, config.drain_batch)


@cache
def _count_read(sharded: bool, skipping: bool, batch: int) -> Any:
    """`count_due`'s read, built once (`claimable_bound`): the claimable rows, up to a
    batch, in the claim's order, none to a recipient in the parameter `skip`."""
    query = select(Message.id).where(*claimable_bound(sharded))
    if skipping:
        query = query.where(Message.recipient.not_in(bindparam("skip", expanding=True)))
    limited = query.order_by(CLAIM_ORDER).limit(batch).subquery()
    return select(func.count()).select_from(limited)


def owed_verdicts(session: Session, identity_id: int, lane: str, now: datetime) -> list[int]:
    """Messages of this identity and lane whose grace wait is over and owe a verdict."""
    plan_without_sorts(session)
    return list(
        session.scalars(
            select(Message.id)
            .where(
                Message.identity_id == identity_id,
                Message.lane == lane,
                Message.status == Status.SENDING.value,
                Message.pending_verdict.is_not(None),
                Message.next_attempt_at <= now,
            )
            # Oldest first, as `ix_messages_owed_verdicts` gives them (`plan_without_sorts`).
            .order_by(Message.next_attempt_at)
            .limit(100)
        )
    )


def earliest_due(
    session: Session, identity_id: int, lane: str, now: datetime, shard: Shard = WHOLE
) -> datetime | None:
    """When this identity and lane (its `shard` of it) next has something due: a retry, a
    verdict, a lease that will expire, or a scheduled message's `send_at` (None: nothing
    is waiting)."""
    # Each the first row in an order one index gives, `ix_messages_due` and
    # `ix_messages_leases` (see `plan_without_sorts`); `min()` let PostgreSQL read the
    # whole waiting set through another index when the statistics predate the backlog.
    plan_without_sorts(session)
    waiting = [
        session.scalar(
            select(column)
            .where(
                Message.identity_id == identity_id,
                Message.lane == lane,
                Message.status == Status.SENDING.value,
                column > now,
                *in_shard(shard),
            )
            .order_by(column)
            .limit(1)
        )
        for column in (Message.next_attempt_at, Message.lease_until)
    ]
    # Through `ix_messages_scheduled`: the drain rings itself for it, and the sweeper
    # rings it too once due (`due_drains`), after a Redis flush as well.
    waiting.append(
        session.scalar(
            select(Message.not_before)
            .where(
                Message.identity_id == identity_id,
                Message.lane == lane,
                Message.status == Status.QUEUED.value,
                Message.not_before.is_not(None),
                Message.not_before > now,
                *in_shard(shard),
            )
            .order_by(Message.not_before)
            .limit(1)
        )
    )
    times = [t for t in waiting if t is not None]
    return min(times) if times else None


def due_again_at(session: Session, message_id: int, now: datetime) -> tuple[str, datetime] | None:
    """(lane, time) when a message that is not due yet will be: its retry or its verdict.

    RQ keeps a scheduled time to whole seconds, so a ring can arrive just before the
    message's `next_attempt_at`; the job rings it again for that time instead of leaving
    it to the sweeper. A lease in flight is not rung: its holder rings what comes next.
    """
    row = session.execute(
        select(Message.lane, Message.status, Message.next_attempt_at).where(
            Message.id == message_id
        )
    ).first()
    if row is None or row.status != Status.SENDING.value or row.next_attempt_at is None:
        return None
    if row.next_attempt_at <= now:
        return None
    return row.lane, row.next_attempt_at
