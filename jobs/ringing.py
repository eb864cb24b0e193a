"""Ringing an identity's lane or a message: the one entry point for views, commands, bulk
plans and the sweeper (`ring_message`, `ring_identity`). Each rings the drains of the
shards concerned (`app/shards.py` says what a shard is; `jobs.drain.ring_shard` rings one).

A ring names an identity and lane, or a message. With one shard (a small identity) that
is shard 0, read from the identity's rates; with several, the shards that hold a waiting
message (a ring for the identity), or the message's own shard. Each answer costs one or a
few index probes, and without the database each falls back to every shard of the lane's
most: ringing a shard with nothing due costs one empty step of its drain.
"""

from __future__ import annotations

import logging
from datetime import datetime

from flask import current_app
from sqlalchemy.exc import SQLAlchemyError

from app.config import Config
from app.db import get_db
from app.repo.shards import identity_shards, message_shard, waiting_shards
from jobs.drain import ring_shard
from jobs.queues import LANES

log = logging.getLogger(__name__)


def ring_identity(
    identity_id: int,
    lane: str,
    config: Config,
    *,
    at: datetime | None = None,
    shard: int | None = None,
) -> bool:
    """Ring the drain of one shard of an identity's lane, or (`shard` None) of each shard
    holding a waiting message, now or at a time (False: Redis is down)."""
    shards = shards_to_ring(identity_id, lane, config) if shard is None else [shard]
    return all([ring_shard(identity_id, lane, config, s, at=at) for s in shards])


def ring_after_new_rates(identity_id: int, config: Config) -> bool:
    """New rates can change how many shards a lane has: ring each shard of either lane
    that now holds a waiting message, so none waits for the sweeper's next pass. False:
    Redis is down (the sweeper rings them)."""
    return all([ring_identity(identity_id, lane, config) for lane in LANES])


def ring_message(message_id: int, lane: str, identity_id: int) -> bool:
    """A message became due: ring the drain of its shard of its identity's lane (message
    0: of each shard with something waiting). False: Redis is unreachable; the sweeper
    rings it later."""
    config: Config = current_app.config["RATCHET"]
    shard = shard_to_ring(message_id, config) if message_id else None
    return ring_identity(identity_id, lane, config, shard=shard)


def shards_to_ring(identity_id: int, lane: str, config: Config) -> list[int]:
    """The shards of the identity's lane with a waiting message (always shard 0 of one)."""
    try:
        with get_db().transaction() as session:
            count = identity_shards(session, identity_id, lane, config)
            return waiting_shards(session, identity_id, lane, count)
    except SQLAlchemyError as exc:
        log.warning(
            "could not read the shards of identity %s's %s lane (%s): ringing all of them",
            identity_id,
            lane,
            exc.__class__.__name__,
        )
        return list(range(config.shard_max))


def shard_to_ring(message_id: int, config: Config) -> int | None:
    """The shard that sends this message now (None: unknown, ring the identity's)."""
    try:
        with get_db().transaction() as session:
            return message_shard(session, message_id, config)
    except SQLAlchemyError as exc:
        log.warning("could not read the shard of message %s: %s", message_id, exc)
        return None
