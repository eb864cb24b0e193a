"""The API's intake limits per tenant: past one, a 429 with `Retry-After` and a JSON body
naming the limit, before anything is read or stored (docs/api.md, "Limits").

The rate is checked here for a key verified by the ordinary path (`refuse_past_limits`,
from the API's `before_request`), and before Flask for a key this process verified within
the last second (app/views/intake_gate.py); both ask `rate_wait` and answer with
`limit_body`, so a refusal reads the same whichever path gave it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Any

from flask import Response, current_app, jsonify, request
from redis.exceptions import RedisError

from app import intake
from app.db import get_db
from app.repo.tenant_settings import count_waiting
from app.views.keycache import KeyHolder
from jobs.queues import get_redis

log = logging.getLogger(__name__)

# The endpoint that adds a waiting message.
CREATE = "api.create"
# Set in a request's environ by the gate when it took the request from the tenant's rate.
RATE_TAKEN = "ratchet.intake.rate_taken"
# Where each web process keeps its `intake.Refusals`: `app.extensions[REFUSALS]`.
REFUSALS = "ratchet.intake.refusals"


def rate_wait(extensions: dict[str, Any], tenant: KeyHolder, rate: float) -> float:
    """Take one request from the tenant's rate: 0.0 if taken (or Redis could not be
    asked), else the seconds until one would fit. Needs no request or app context."""
    refusals: intake.Refusals = extensions.setdefault(REFUSALS, intake.Refusals())
    asked_at = time.monotonic()
    known = refusals.remaining(tenant.id, rate, asked_at)
    if known > 0:
        return known
    try:
        wait = intake.take_request(extensions["ratchet.redis"], tenant.id, rate)
    except RedisError as exc:
        # The rate lives in Redis: without it, the request goes on unlimited.
        log.warning("intake rate of tenant %s not checked, Redis failed: %s", tenant.id, exc)
        return 0.0
    refusals.note(tenant.id, rate, asked_at, wait)
    return wait


def rate_body(rate: float, wait: float) -> tuple[int, dict[str, Any]]:
    return limit_body(
        "requests_per_second", rate, wait, f"more than {rate:g} requests per second for this tenant"
    )


def limit_body(name: str, value: float, wait: float, why: str) -> tuple[int, dict[str, Any]]:
    """A 429's `Retry-After` (whole seconds, at least one) and its JSON body."""
    retry_after = max(1, math.ceil(wait))
    return retry_after, {
        "error": f"limit reached: {why}; try again in {retry_after} s",
        "limit": name,
        "value": value,
        "retry_after": retry_after,
    }


def refuse_past_limits(tenant: KeyHolder) -> Response | None:
    """A 429 when this request would pass one of the tenant's limits, else None."""
    rate = tenant.max_requests_per_second
    if rate is not None and not request.environ.get(RATE_TAKEN):
        wait = rate_wait(current_app.extensions, tenant, rate)
        if wait > 0:
            return _limited(*rate_body(rate, wait))
    most = tenant.max_waiting
    if most is not None and request.endpoint == CREATE:
        waiting = _waiting(tenant.id, most)
        if waiting >= most:
            return _limited(
                *limit_body(
                    "max_waiting",
                    most,
                    intake.WAITING_CACHE_MS / 1000,
                    f"{most} or more of this tenant's messages are waiting to be sent; "
                    "nothing was stored",
                )
            )
    return None


def _waiting(tenant_id: int, most: int) -> int:
    try:
        cached = intake.cached_waiting(get_redis(), tenant_id)
    except RedisError:
        cached = None
    if cached is not None:
        return cached
    with get_db().transaction() as session:
        counted = count_waiting(session, tenant_id, most)
    with contextlib.suppress(RedisError):  # without Redis: counted again next time
        intake.cache_waiting(get_redis(), tenant_id, counted)
    return counted


def note_accepted(response: Response, tenant_id: int) -> None:
    """After a 201 from the create endpoint: one more waiting in the cached count."""
    if request.endpoint == CREATE and response.status_code == 201:
        with contextlib.suppress(RedisError):  # the cached count expires within a second
            intake.add_waiting(get_redis(), tenant_id)


def _limited(retry_after: int, body: dict[str, Any]) -> Response:
    response = jsonify(body)
    response.status_code = 429
    response.headers["Retry-After"] = str(retry_after)
    return response
