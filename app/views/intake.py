"""The API's intake limits per tenant: past one, a 429 with `Retry-After` and a JSON body
naming the limit, before anything is read or stored (docs/api.md, "Limits")."""

from __future__ import annotations

import contextlib
import logging
import math

from flask import Response, request
from redis.exceptions import RedisError

from app import intake
from app.db import get_db
from app.repo.tenant_settings import count_waiting
from app.views.errors import json_error
from app.views.keycache import KeyHolder
from jobs.queues import get_redis

log = logging.getLogger(__name__)

# The endpoint that adds a waiting message.
CREATE = "api.create"


def refuse_past_limits(tenant: KeyHolder) -> Response | None:
    """A 429 when this request would pass one of the tenant's limits, else None."""
    rate = tenant.max_requests_per_second
    if rate is not None:
        try:
            wait = intake.take_request(get_redis(), tenant.id, rate)
        except RedisError as exc:
            # The rate lives in Redis: without it, the request goes on unlimited.
            log.warning("intake rate of tenant %s not checked, Redis failed: %s", tenant.id, exc)
            wait = 0.0
        if wait > 0:
            return _limited(
                "requests_per_second",
                rate,
                wait,
                f"more than {rate:g} requests per second for this tenant",
            )
    most = tenant.max_waiting
    if most is not None and request.endpoint == CREATE:
        waiting = _waiting(tenant.id, most)
        if waiting >= most:
            return _limited(
                "max_waiting",
                most,
                intake.WAITING_CACHE_MS / 1000,
                f"{most} or more of this tenant's messages are waiting to be sent; "
                "nothing was stored",
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


def _limited(name: str, value: float, wait: float, why: str) -> Response:
    retry_after = max(1, math.ceil(wait))
    response = json_error(
        429,
        f"limit reached: {why}; try again in {retry_after} s",
        limit=name,
        value=value,
        retry_after=retry_after,
    )
    response.headers["Retry-After"] = str(retry_after)
    return response
