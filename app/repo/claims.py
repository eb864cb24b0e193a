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

from sqlalchemy import and_, case, func, insert, literal_column, or_, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.models import Identity, Message, MessageEvent
from app.repo.conversations import HOLD, OVERTAKEN, in_conversation_order, overtaken_id
from app.repo.events import append_event
from app.repo.shards import in_shard
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


def is_waiting() -> Any:
    """Queued or sending: the predicate of the waiting rows' partial indexes, written out
    beside `is_due` (which implies it) for SQLite, whose planner cannot prove it from
    `is_due`'s OR and would otherwise read and sort the lane's whole history."""
    return Message.status.in_([Status.QUEUED.value, Status.SENDING.value])


def is_due(now: datetime) -> Any:
    """A message a worker may claim now (identity active is checked separately): queued
    and past its `send_at` if it had one, or sending and due again."""
    return or_(
        and_(
            Message.status == Status.QUEUED.value,
            or_(Message.not_before.is_(None), Message.not_before <= now),
        ),
        and_(
            Message.status == Status.SENDING.value,
            or_(
                and_(Message.next_attempt_at.is_not(None), Message.next_attempt_at <= now),
                and_(Message.lease_until.is_not(None), Message.lease_until < now),
                # Held for a broken sender (no next attempt, no lease): due once its identity
                # is active again, even if a pause and a resume raced each other.
                and_(Message.next_attempt_at.is_(None), Message.lease_until.is_(None)),
            ),
        ),
    )


def unexpired(now: datetime) -> Any:
    """Still valid: an expired message is never claimed; a drain fails it instead
    (`app/repo/expiry.py`). Except a lease that lapsed: its call's outcome is unknown (the
    provider may have it), so it is re-claimed as ever, with no call, and its plan waits
    the webhook grace before failing it `expired` (`app/retry.py`)."""
    return or_(
        Message.expires_at.is_(None),
        Message.expires_at > now,
        and_(Message.status == Status.SENDING.value, Message.lease_until.is_not(None)),
    )


def claimable(
    identity_id: int, lane: str, now: datetime, hold: timedelta = HOLD, shard: Shard = WHOLE
) -> tuple[Any, ...]:
    """A message of this identity and lane a drain may claim now: due, owing no verdict
    (`take_verdict` records those), not expired, next in its conversation
    (`app/repo/conversations.py`), and using no template Meta paused, disabled or
    rejected (`app/repo/template_holds.py`); and in this drain's `shard` of the lane
    (`app/repo/shards.py`). The identity's pause is read apart, under a lock."""
    return (
        Message.identity_id == identity_id,
        Message.lane == lane,
        is_waiting(),
        is_due(now),
        Message.pending_verdict.is_(None),
        unexpired(now),
        not_template_held(identity_id),
        in_conversation_order(now, hold, identity_id),
        *in_shard(shard),
    )


CAMPAIGN = "campaign"

# A drain's order, oldest first, written `id + 0`: the order only `ix_messages_waiting`
# gives (migration 0011). Ordered by `id`, PostgreSQL may walk the primary key from the
# table's first row, rating the waiting rows as spread evenly where they sit after the
# whole history. A literal, never a parameter: a generic plan must see the same expression.
CLAIM_ORDER = Message.id + literal_column("0")


def plan_without_sorts(session: Session) -> None:
    """Plan the rest of this transaction's statements with no sort where a plan without
    one exists (PostgreSQL's `enable_sort`, until the transaction ends).

    For a drain's reads of the queue: each is ordered as one of its indexes gives it
    (`CLAIM_ORDER`, `next_attempt_at`), and is then read from that index. Statistics
    taken before a backlog rate every waiting row at none, and any index followed by a sort
    of "one row" looks as cheap: one read the whole waiting set on every step.

    Each such read calls this first; the setting is sent once per transaction, and holds
    for every statement after it in that transaction: a statement added there with an
    ORDER BY that no index gives still sorts, but one that an index could give (even a
    poor one) will walk that index instead."""
    if session.get_bind().dialect.name != "postgresql":
        return
    transaction = session.get_transaction()
    if transaction is not None and session.info.get(_WITHOUT_SORTS) is transaction:
        return
    session.execute(select(func.set_config("enable_sort", "off", True)))
    session.info[_WITHOUT_SORTS] = transaction


_WITHOUT_SORTS = "ratchet.plan_without_sorts"


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

    1. Pick them in one `SELECT ... FOR UPDATE SKIP LOCKED` (PostgreSQL): drains of the same
       identity never wait on each other's rows. SQLite serialises writers instead.
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
    due = claimable(identity_id, lane, now, hold, shard)
    columns = (
        Message.id,
        Message.status,
        Message.cycle,
        Message.attempt,
        Message.next_attempt_at,
        Message.lease_until,
        overtaken_id(now, identity_id).label("overtakes"),
    )
    rows: list[Any] = []
    if one_each:
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
                .with_for_update(skip_locked=True)
            ).all()
        )
    if len(rows) < limit:
        query = (
            select(*columns)
            .where(*due)
            .order_by(CLAIM_ORDER)
            .limit(limit - len(rows))
            .with_for_update(skip_locked=True)
        )
        skip = [*(skip_recipients or ()), *one_each]
        if skip:
            query = query.where(Message.recipient.not_in(skip))
        rows += session.execute(query).all()
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
