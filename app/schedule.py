"""When a send request may go, and until when (issue 34; docs/design.md section 7,
"Scheduled and expiring messages"). Pure: the API passes its clock in.

`send_at` still ahead becomes the message's `not_before`; one already past means now and
stores nothing. The validity, `valid_for` seconds counted from when the message is due
(`send_at`, else now) or an `expires_at`, becomes `expires_at`. A request that gives
neither takes the identity's default validity for the message's lane, counted the same way
(`with_default_validity`): an explicit value always wins, even a longer one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.sendrequest import MAX_AHEAD_SECONDS, RequestError, SendRequest

MAX_AHEAD = timedelta(seconds=MAX_AHEAD_SECONDS)


@dataclass(frozen=True, slots=True)
class Schedule:
    not_before: datetime | None = None
    expires_at: datetime | None = None


def schedule(request: SendRequest, now: datetime) -> Schedule:
    """The message's `not_before` and `expires_at`, or a `RequestError` naming the field."""
    not_before = None
    if request.send_at is not None:
        if request.send_at - now > MAX_AHEAD:
            raise RequestError(
                "send_at: must be at most 35 days ahead; nothing was stored", "send_at"
            )
        if request.send_at > now:
            not_before = request.send_at
    due = not_before or now
    if request.valid_for is not None and request.expires_at is not None:
        raise RequestError("give valid_for or expires_at, not both", "valid_for")
    expires_at = None
    if request.valid_for is not None:
        expires_at = due + timedelta(seconds=request.valid_for)
    elif request.expires_at is not None:
        if request.expires_at <= due:
            which = "send_at" if not_before is not None else "now"
            raise RequestError(
                f"expires_at: must be after {which}; nothing was stored", "expires_at"
            )
        if request.expires_at - due > MAX_AHEAD:
            raise RequestError(
                "expires_at: must be at most 35 days after the message is due; nothing was stored",
                "expires_at",
            )
        expires_at = request.expires_at
    return Schedule(not_before, expires_at)


def with_default_validity(
    when: Schedule, request: SendRequest, default: int | None, now: datetime
) -> Schedule:
    """`when`, expiring after the identity's default validity for the lane (seconds, counted
    from when the message is due) if the request gave neither `valid_for` nor `expires_at`."""
    if default is None or request.valid_for is not None or request.expires_at is not None:
        return when
    due = when.not_before or now
    return Schedule(when.not_before, due + timedelta(seconds=default))
