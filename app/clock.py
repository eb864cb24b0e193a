"""Our clock. Code that decides takes `now` as an argument; only the edges read this."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
