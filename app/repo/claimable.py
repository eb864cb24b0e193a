"""What a drain may claim: the predicate of a due, claimable message (`claimable`), the
order a drain reads the waiting rows in (`CLAIM_ORDER`), and how those reads are planned
(`plan_without_sorts`). The claims (`app/repo/claims.py`) and the counts
(`app/repo/due.py`) read from here.

`claimable` builds the predicate for one identity, lane and instant. A drain asks the same
question at every step with other values, so its two reads (how many are due, and which)
are built once per shape with bound parameters (`claimable_bound`, `claim_parameters`):
building and keying the predicate anew cost about 2.5 ms of CPU a step, most of a step's
cost at a low rate (`bench/pacing.py`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    and_,
    bindparam,
    func,
    literal_column,
    or_,
    select,
)
from sqlalchemy.orm import Session

from app.dbtypes import UTCDateTime
from app.lifecycle import Status
from app.models import Message
from app.repo.conversations import HOLD, in_conversation_order, overtaken_id
from app.repo.shards import in_key_range
from app.repo.template_holds import not_template_held
from app.shards import WHOLE, Shard


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
    keys = None if shard.is_whole else shard.key_range()
    return _claimable(identity_id, lane, now, now - hold, keys)


def _claimable(identity_id: Any, lane: Any, now: Any, since: Any, keys: Any) -> tuple[Any, ...]:
    shard = () if keys is None else in_key_range(*keys)
    return (
        Message.identity_id == identity_id,
        Message.lane == lane,
        is_waiting(),
        is_due(now),
        Message.pending_verdict.is_(None),
        unexpired(now),
        not_template_held(identity_id),
        in_conversation_order(now, since, identity_id),
        *shard,
    )


@cache
def claimable_bound(sharded: bool) -> tuple[Any, ...]:
    """`claimable` once, with bound parameters in place of its values (given by
    `claim_parameters`): the same SQL, built and keyed once for every step."""
    keys = (bindparam("shard_low", type_=Integer), bindparam("shard_high", type_=Integer))
    return _claimable(
        bindparam("identity_id", type_=BigInteger),
        bindparam("lane", type_=String),
        bindparam("now", type_=UTCDateTime()),
        bindparam("since", type_=UTCDateTime()),
        keys if sharded else None,
    )


def claim_parameters(
    identity_id: int, lane: str, now: datetime, hold: timedelta, shard: Shard
) -> dict[str, Any]:
    """The values of `claimable_bound(not shard.is_whole)`."""
    values: dict[str, Any] = {
        "identity_id": identity_id,
        "lane": lane,
        "now": now,
        "since": now - hold,
    }
    if not shard.is_whole:
        values["shard_low"], values["shard_high"] = shard.key_range()
    return values


def claim_columns(now: Any, identity_id: Any) -> tuple[Any, ...]:
    """What the claim reads of each row it takes: its state, and the earlier message of
    its conversation it overtakes, if any (values or bound parameters)."""
    return (
        Message.id,
        Message.status,
        Message.cycle,
        Message.attempt,
        Message.next_attempt_at,
        Message.lease_until,
        overtaken_id(now, identity_id).label("overtakes"),
    )


@cache
def claim_read(sharded: bool, skipping: bool) -> Any:
    """The claim's read (`claim_batch`): the oldest claimable rows (`claimable_bound`), up
    to the parameter `limit`, none to a recipient in the expanding parameter `skip` (when
    `skipping`), locked and skipping rows another drain holds (PostgreSQL), each with
    the earlier message of its conversation it overtakes, if any."""
    now, identity_id = (
        bindparam("now", type_=UTCDateTime()),
        bindparam("identity_id", type_=BigInteger),
    )
    query = (
        select(*claim_columns(now, identity_id))
        .where(*claimable_bound(sharded))
        .order_by(CLAIM_ORDER)
        .limit(bindparam("limit", type_=Integer))
        .with_for_update(skip_locked=True, key_share=True)
    )
    if skipping:
        query = query.where(Message.recipient.not_in(bindparam("skip", expanding=True)))
    return query


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
