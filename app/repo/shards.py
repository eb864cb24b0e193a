"""Which shard of its lane a message is in, and which shards have work: the queries the
drains and everything that rings them ask (`app/shards.py` says what a shard is)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Config
from app.models import Identity, Message
from app.shards import Shard, shard_count, shard_of

REPLY = "reply"


def lane_shards(identity: Any, lane: str, config: Config) -> int:
    """How many shards the identity's lane has: from the fastest it may send on that lane
    (its lane rate, within its total), so a small identity keeps one."""
    rate = identity.reply_rate if lane == REPLY else identity.campaign_rate
    if identity.total_rate:
        rate = min(rate, identity.total_rate)
    return shard_count(rate, config.shard_rate, config.shard_max)


def in_shard(shard: Shard) -> list[Any]:
    """The claim's filter for one shard: a range of `shard_key`, read in
    `ix_messages_waiting` (its last column); none for a lane's only shard."""
    return [] if shard.is_whole else in_key_range(*shard.key_range())


def in_key_range(low: Any, high: Any) -> list[Any]:
    """`shard_key` in [low, high): values, or bound parameters (`app/repo/claimable.py`)."""
    return [Message.shard_key >= low, Message.shard_key < high]


def identity_shards(session: Session, identity_id: int, lane: str, config: Config) -> int:
    """The shard count of an identity's lane (1 for an identity that is not there)."""
    row = session.execute(
        select(Identity.reply_rate, Identity.campaign_rate, Identity.total_rate).where(
            Identity.id == identity_id
        )
    ).first()
    return 1 if row is None else lane_shards(row, lane, config)


def waiting_shards(session: Session, identity_id: int, lane: str, count: int) -> list[int]:
    """The shards of `count` holding a waiting message (queued or sending) of this identity
    and lane: due now, or due later, when their drain rings itself. One probe of
    `ix_messages_waiting` each."""
    if count <= 1:
        return [0]
    found = []
    for index in range(count):
        hit = session.scalar(
            select(Message.id)
            .where(
                Message.identity_id == identity_id,
                Message.lane == lane,
                Message.status.in_(["queued", "sending"]),
                *in_shard(Shard(index, count)),
            )
            .limit(1)
        )
        if hit is not None:
            found.append(index)
    return found


def message_shard(session: Session, message_id: int, config: Config) -> int | None:
    """The shard of its lane that sends this message now (None: no such message)."""
    row = session.execute(
        select(
            Message.shard_key,
            Message.lane,
            Identity.reply_rate,
            Identity.campaign_rate,
            Identity.total_rate,
        )
        .join(Identity, Identity.id == Message.identity_id)
        .where(Message.id == message_id)
    ).first()
    if row is None:
        return None
    return shard_of(row.shard_key, lane_shards(row, row.lane, config))
