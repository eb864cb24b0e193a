"""The API key check, remembered for a second per web process.

Every request of a tenant's system carries its key; checking it is a database round trip
(a transaction, a lookup by prefix) that was half the cost of a request refused by an
intake limit, so a tenant flooding the API spent the database's time on its refusals. A
key that verified is remembered, with the tenant's limits, for `REMEMBER_SECONDS` by the
SHA-256 of the whole key (never the key itself): a limit changed from the CLI or the
dashboard applies within that second. A key that did not verify is never remembered.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from flask import current_app

from app.db import get_db
from app.repo.tenants import authenticate

REMEMBER_SECONDS = 1.0
MOST_REMEMBERED = 10_000
# Where each web process keeps them: `app.extensions[CACHE]`, by the key's SHA-256.
CACHE = "ratchet.api_keys"


@dataclass(frozen=True, slots=True)
class KeyHolder:
    """The tenant a key verified as, and its intake limits at that moment."""

    id: int
    name: str
    max_requests_per_second: float | None
    max_waiting: int | None


def remembered_tenant(extensions: dict[str, Any], key: str, now: float) -> KeyHolder | None:
    """The tenant `key` verified as within the last second in this process, else None
    (never verified, verified too long ago, or not a valid key): no database, no Flask."""
    remembered: dict[str, tuple[float, KeyHolder]] | None = extensions.get(CACHE)
    if not remembered:
        return None
    hit = remembered.get(_digest(key))
    if hit is not None and hit[0] > now:
        return hit[1]
    return None


def tenant_for_key(key: str, clock: float | None = None) -> KeyHolder | None:
    now = time.monotonic() if clock is None else clock
    remembered: dict[str, tuple[float, KeyHolder]] = current_app.extensions.setdefault(CACHE, {})
    digest = _digest(key)
    hit = remembered.get(digest)
    if hit is not None and hit[0] > now:
        return hit[1]
    with get_db().transaction() as session:
        tenant = authenticate(session, key)
        if tenant is None:
            return None
        holder = KeyHolder(
            tenant.id, tenant.name, tenant.max_requests_per_second, tenant.max_waiting
        )
    if len(remembered) >= MOST_REMEMBERED:
        remembered.clear()  # many keys at once: start again rather than grow
    remembered[digest] = (now + REMEMBER_SECONDS, holder)
    return holder


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
