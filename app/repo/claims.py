"""Claims: taking due messages for an attempt, one or a batch, as fenced updates.

A claim moves a message to (or keeps it in) `sending` with a fresh attempt number and a
lease; every write that records the attempt's outcome is fenced on that attempt and cycle
(`fenced`, in `app/repo/attempts.py`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, insert, or_, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import Identity, Message, MessageEvent
from app.repo.claimable import (
    CLAIM_ORDER,
    claim_columns,
    claim_parameters,
    claim_read,
    claimable,
    is_due,
    plan_without_sorts,
    unexpired,
)
from app.repo.conversations import HOLD, OVERTAKEN
from app.repo.events import append_event
from app.repo.sql import keyed, rows_changed
from app.repo.template_holds import not_template_held
from app.shards import WHOLE, Shard


@dataclass(frozen=True, slots=True)
class Claim:
    message_id: int
    identity_id: int
    cycle: int
    attempt: int
    lease_lost: bool  # re-claimed after another worker's lease expired: that outcome is unknown
    claimed_at: datetime  # our clock at the claim; the lease runs from here


CAMPAIGN = "campaign"


def lane_paused(identity: Any, lane: str) -> bool:
    """Whether this identity sends nothing on this lane now: paused whole, or its campaign
    lane paused alone (replies go on)."""
    if identity.paused_at is not None:
        return True
    return lane == CAMPAIGN and identity.campaign_paused_at is not None


def claim_message(
    session: Session, message_id: int, now: datetime, lease: timedelta
) -> Claim | None:
    """Take the message for one attempt, or None if it is not ours to send now.

    One compare-and-set on the state just read: `queued`, or `sending` and due (its retry
    time has come, or the previous worker's lease expired), and its identity active.
    """
    row = session.execute(
        select(
            Message.status,
            Message.cycle,
            Message.attempt,
            Message.identity_id,
            Message.next_attempt_at,
            Message.lease_until,
            Message.pending_verdict,
            Message.lane,
            Identity.paused_at,
            Identity.campaign_paused_at,
        )
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.id == message_id)
    ).first()
    if row is None or lane_paused(row, row.lane) or row.pending_verdict is not None:
        return None
    if row.status not in (Status.QUEUED.value, Status.SENDING.value):
        return None
    lease_lost = (
        row.status == Status.SENDING.value
        and row.lease_until is not None
        and row.lease_until < now
        and (row.next_attempt_at is None or row.next_attempt_at > now)
    )
    values: dict[str, Any] = {
        "status": Status.SENDING.value,
        "attempt": row.attempt + 1,
        "next_attempt_at": None,
        "lease_until": now + lease,
        "last_attempt_at": now,
        # Unknown until the call starts (`stamp_call_start`): no watermark matches it before.
        "request_started_ms": None,
    }
    if row.status == Status.QUEUED.value:
        values["sending_at"] = now
    if lease_lost:
        # The attempt whose lease expired never reported: an unknown outcome, counted here
        # in the claim itself so that workers dying one after another still reach the cap.
        values["unknown_attempts"] = Message.unknown_attempts + 1
        values["had_unknown_outcome"] = True
    paused = select(Identity.paused_at).where(Identity.id == Message.identity_id)
    # A campaign-lane pause committed since the read above stops the claim too.
    campaign_paused = select(Identity.campaign_paused_at).where(Identity.id == Message.identity_id)
    changed = rows_changed(
        session,
        update(Message)
        .where(
            Message.id == message_id,
            keyed(Message.status == row.status),
            Message.cycle == row.cycle,
            Message.attempt == row.attempt,
            keyed(is_due(now)),
            unexpired(now),
            # A verdict owed is recorded by `take_verdict`, never sent again.
            Message.pending_verdict.is_(None),
            not_template_held(),
            paused.scalar_subquery().is_(None),
            or_(Message.lane != CAMPAIGN, campaign_paused.scalar_subquery().is_(None)),
        )
        .values(**values)
        .execution_options(synchronize_session=False),
    )
    if changed != 1:
        return None  # another worker, a webhook or an operator got there first
    append_event(
        session,
        message_id=message_id,
        cycle=row.cycle,
        source=Source.WORKER.value,
        kind="claim",
        received_at=now,
        applied=True,
        from_status=row.status,
        to_status=Status.SENDING.value,
        detail={
            "attempt": row.attempt + 1,
            "lease_lost": lease_lost,
            # When it was due: a claim is never earlier than its retry time.
            "due_at": row.next_attempt_at.isoformat() if row.next_attempt_at else None,
        },
    )
    return Claim(message_id, row.identity_id, row.cycle, row.attempt + 1, lease_lost, now)


def claim_batch(
    session: Session,
    identity_id: int,
    lane: str,
    limit: int,
    now: datetime,
    lease: timedelta,
    *,
    skip_recipients: list[str] | None = None,
    one_each: Collection[str] = (),
    hold: timedelta = HOLD,
    shard: Shard = WHOLE,
) -> list[Claim]:
    """Claim up to `limit` due messages of one identity and lane for one attempt each.

    1. Pick them in one `SELECT ... FOR NO KEY UPDATE SKIP LOCKED` (PostgreSQL): drains of
       the same identity never wait on each other's rows. SQLite serialises writers instead.
    2. Move them in one UPDATE computing each row's values from its own state, exactly as
       `claim_message` does for one (the rows are locked, so the state read is the state
       written over), and append one claim event each in one INSERT.
    A paused identity claims nothing, nor does a paused campaign lane; a message owing a
    verdict is left to `take_verdict`, and a message behind an earlier one of its
    conversation waits for it (at most `hold` behind a retry). Messages to `skip_recipients`
    are not claimed, and of those to a recipient in `one_each` only the oldest, before any
    other (the provider's pair limit).
    """
    if limit <= 0:
        return []
    # Read with a share lock: a pause committing now waits for this claim, or this claim
    # sees the pause; a pause never lets a batch through after its commit.
    state = session.execute(
        select(Identity.paused_at, Identity.campaign_paused_at)
        .where(Identity.id == identity_id)
        .with_for_update(read=True)
    ).first()
    if state is None or lane_paused(state, lane):
        return []
    plan_without_sorts(session)
    rows: list[Any] = []
    if one_each:
        due = claimable(identity_id, lane, now, hold, shard)
        columns = claim_columns(now, identity_id)
        # First, the oldest due message of each paced recipient: one each.
        oldest = (
            select(func.min(Message.id))
            .where(*due, Message.recipient.in_(one_each))
            .group_by(Message.recipient)
        )
        rows = list(
            session.execute(
                select(*columns)
                .where(*due, Message.id.in_(oldest))
                .order_by(CLAIM_ORDER)
                .limit(limit)
                .with_for_update(skip_locked=True, key_share=True)
            ).all()
        )
    if len(rows) < limit:
        # Built once (`claim_read`): the same read as `columns` from `due`, with parameters.
        given = claim_parameters(identity_id, lane, now, hold, shard)
        given["limit"] = limit - len(rows)
        skip = [*(skip_recipients or ()), *one_each]
        if skip:
            given["skip"] = skip
        rows += session.execute(claim_read(not shard.is_whole, bool(skip)), given).all()
    if not rows:
        return []
    claims = []
    for row in rows:
        lease_lost = (
            row.status == Status.SENDING.value
            and row.lease_until is not None
            and row.lease_until < now
            and (row.next_attempt_at is None or row.next_attempt_at > now)
        )
        claims.append(
            (Claim(row.id, identity_id, row.cycle, row.attempt + 1, lease_lost, now), row)
        )
    ids = [claim.message_id for claim, _ in claims]
    lost = [claim.message_id for claim, _ in claims if claim.lease_lost]
    queued = Message.status == Status.QUEUED.value
    values: dict[str, Any] = {
        "status": Status.SENDING.value,
        "attempt": Message.attempt + 1,
        "next_attempt_at": None,
        "lease_until": now + lease,
        "last_attempt_at": now,
        # Unknown until the call starts (`stamp_call_start`): no watermark matches it before.
        "request_started_ms": None,
        "sending_at": case((queued, now), else_=Message.sending_at),
    }
    if lost:
        values["unknown_attempts"] = case(
            (Message.id.in_(lost), Message.unknown_attempts + 1), else_=Message.unknown_attempts
        )
        values["had_unknown_outcome"] = case(
            (Message.id.in_(lost), True), else_=Message.had_unknown_outcome
        )
    session.execute(
        update(Message)
        .where(Message.id.in_(ids))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        insert(MessageEvent),
        [
            {
                "message_id": claim.message_id,
                "cycle": claim.cycle,
                "source": Source.WORKER.value,
                "kind": "claim",
                "from_status": row.status,
                "to_status": Status.SENDING.value,
                "applied": True,
                "received_at": now,
                "detail": {
                    "attempt": claim.attempt,
                    "lease_lost": claim.lease_lost,
                    "due_at": row.next_attempt_at.isoformat() if row.next_attempt_at else None,
                    "batch": len(claims),
                    # Past the conversation's hold: the earlier message is still retrying.
                    **(
                        {"overtook": row.overtakes, "note": OVERTAKEN.format(row.overtakes)}
                        if row.overtakes
                        else {}
                    ),
                },
            }
            for claim, row in claims
        ],
    )
    return [claim for claim, _ in claims]
