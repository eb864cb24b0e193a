"""Correlation ids: what we send the provider to find a message again (WhatsApp echoes it
as `biz_opaque_callback_data` in its status webhooks).

`ratchet:<message id>:<cycle>:<tag>`, where the tag is an HMAC of the id and cycle under a
key derived from SECRET_KEY. Without the tag the id would be guessable, and equal across
installations (staging and production sharing a number, a database restored from a
backup): a signed status naming it could move a message that was never sent. Pure: the
key is passed in.
"""

from __future__ import annotations

import hashlib
import hmac

PREFIX = "ratchet"
TAG_HEX = 24  # 96 bits; the whole id stays within the 64-character column


def derive_key(secret_key: str) -> bytes:
    """The correlation key, separate from every other use of SECRET_KEY."""
    return hmac.new(secret_key.encode(), b"ratchet correlation ids v1", hashlib.sha256).digest()


def _tag(key: bytes, message_id: int, cycle: int) -> str:
    return hmac.new(key, f"{message_id}:{cycle}".encode(), hashlib.sha256).hexdigest()[:TAG_HEX]


def make_correlation_id(key: bytes, message_id: int, cycle: int) -> str:
    return f"{PREFIX}:{message_id}:{cycle}:{_tag(key, message_id, cycle)}"


def parse_correlation_id(key: bytes, value: str | None) -> tuple[int, int] | None:
    """(message id, cycle) if `value` is one of ours, made under this key; else None."""
    if not value:
        return None
    parts = value.split(":")
    if len(parts) != 4 or parts[0] != PREFIX:
        return None
    message_id, cycle, tag = parts[1], parts[2], parts[3]
    if not (message_id.isascii() and message_id.isdigit() and cycle.isascii() and cycle.isdigit()):
        return None
    if len(message_id) > 19 or len(cycle) > 9:
        return None  # beyond any id we issue (and beyond a 64-bit column)
    expected = _tag(key, int(message_id), int(cycle))
    if not hmac.compare_digest(expected.encode(), tag.encode("utf-8", "replace")):
        return None
    return int(message_id), int(cycle)
