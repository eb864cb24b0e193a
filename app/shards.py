"""Shards: one identity's lane split among several drains (docs/design.md section 7).

A message's `shard_key` is a stable hash of its recipient into `SHARD_KEYS` buckets,
computed once at intake and stored, so every message to one person meets in one shard
whatever the process that hashed it. An identity's lane has `count` shards, sized from
its rate (`shard_count`); shard `index` of `count` holds the keys in one contiguous range
(`key_range`), which the claim reads as a range on an indexed column on PostgreSQL and
SQLite alike. A small identity keeps one shard: no filter at all.

Conversation order does not rest on the shards: the claim's SQL holds a conversation's
next message behind its previous one whichever drain claims (`app/repo/conversations.py`),
so a change of the shard count (a rate changed) cannot reorder a conversation; it only
moves which drain sends it.

Pure: no I/O, nothing of ours imported.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

# Buckets of the hash: the finest split a lane can have (more than any shard count).
SHARD_KEYS = 1024
# The most shards a lane may be split into, whatever the setting says.
MAX_SHARDS = 64


def shard_key_of(recipient: str) -> int:
    """The recipient's bucket, the same in every process and on every machine (Python's
    `hash()` is salted per process: never that)."""
    digest = hashlib.blake2b(recipient.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") % SHARD_KEYS


def shard_count(rate: float, per_shard_rate: float, max_shards: int) -> int:
    """ceil(rate / per_shard_rate), at least 1 and at most `max_shards` (and MAX_SHARDS)."""
    if per_shard_rate <= 0 or rate <= 0:
        return 1
    wanted = math.ceil(rate / per_shard_rate - 1e-9)
    return max(1, min(wanted, max_shards, MAX_SHARDS))


@dataclass(frozen=True, slots=True)
class Shard:
    index: int
    count: int = 1

    @property
    def is_whole(self) -> bool:
        """The lane's only shard: every recipient, no filter."""
        return self.count <= 1

    def key_range(self) -> tuple[int, int]:
        """[low, high) of the keys in this shard: key k is in shard k * count // SHARD_KEYS."""
        low = -(-self.index * SHARD_KEYS // self.count)
        high = -(-(self.index + 1) * SHARD_KEYS // self.count)
        return low, high

    def holds(self, key: int) -> bool:
        return self.is_whole or key * self.count // SHARD_KEYS == self.index


def shard_of(key: int, count: int) -> int:
    """The index of the shard of `count` that holds `key`."""
    return 0 if count <= 1 else key * count // SHARD_KEYS


WHOLE = Shard(0, 1)
