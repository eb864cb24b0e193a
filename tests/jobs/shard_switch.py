"""Shards on for one test: the rate and the most shards of a lane, in the `env` fixture's
app and config (`shard_on`).
"""

from __future__ import annotations

from dataclasses import replace

from .conftest import Env


def shard_on(env: Env, shard_rate: float, shard_max: int = 8) -> None:
    """Shards on for this test (the `env` fixture keeps one per lane)."""
    config = replace(env.config, shard_rate=shard_rate, shard_max=shard_max)
    env.app.config["RATCHET"] = config
    env.config = config
