"""Shards of a lane (`app/shards.py`): a recipient always maps to one shard, the same in
every process, and a lane's shard count follows its rate."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.shards import MAX_SHARDS, SHARD_KEYS, Shard, shard_count, shard_key_of, shard_of

recipients = st.text(min_size=1, max_size=40)
counts = st.integers(min_value=1, max_value=MAX_SHARDS)


@given(recipients, counts)
def test_a_recipient_is_in_exactly_one_shard_of_any_count(recipient: str, count: int) -> None:
    key = shard_key_of(recipient)
    assert 0 <= key < SHARD_KEYS
    holders = [index for index in range(count) if Shard(index, count).holds(key)]
    assert holders == [shard_of(key, count)]
    low, high = Shard(holders[0], count).key_range()
    assert low <= key < high


@given(counts)
def test_the_key_ranges_of_a_lanes_shards_cover_every_key_once(count: int) -> None:
    ranges = [Shard(index, count).key_range() for index in range(count)]
    assert ranges[0][0] == 0 and ranges[-1][1] == SHARD_KEYS
    for (_, high), (low, _) in itertools.pairwise(ranges):
        assert high == low


def test_the_shard_key_is_the_same_in_another_process() -> None:
    """Python's own `hash()` of a string differs per process: the key must not."""
    people = ["15550001111", "15550002222", "psid-1234567890", "+447700900123"]
    script = (
        "from app.shards import shard_key_of; import sys; "
        "print(' '.join(str(shard_key_of(p)) for p in sys.argv[1:]))"
    )
    output = subprocess.run(
        [sys.executable, "-c", script, *people], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [int(key) for key in output] == [shard_key_of(p) for p in people]


@pytest.mark.parametrize(
    ("rate", "per_shard", "most", "expected"),
    [
        (10.0, 250.0, 8, 1),  # a small identity keeps one shard
        (80.0, 250.0, 8, 1),
        (250.0, 250.0, 8, 1),
        (251.0, 250.0, 8, 2),
        (1000.0, 250.0, 8, 4),
        (1000.0, 100.0, 8, 8),  # clamped to the setting
        (100_000.0, 1.0, 1000, MAX_SHARDS),  # and to the hard ceiling
        (0.0, 250.0, 8, 1),
    ],
)
def test_a_lanes_shard_count_follows_its_rate(
    rate: float, per_shard: float, most: int, expected: int
) -> None:
    assert shard_count(rate, per_shard, most) == expected


def test_many_recipients_spread_over_the_shards() -> None:
    """Not a promise of balance, only that the hash is not degenerate on phone numbers."""
    per_shard = [0] * 4
    for n in range(4000):
        per_shard[shard_of(shard_key_of(f"1555{n:07d}"), 4)] += 1
    assert min(per_shard) > 800, per_shard
