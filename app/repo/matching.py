"""The reconciler's lookups: which message a provider's status is about, found and locked.

Small primitives for `app/repo/status_match.py`, which decides what to do with what they
find. Plain Core statements on the tables: the hot path of every webhook, with no ORM
objects.

Each one locks the message row it returns (`FOR NO KEY UPDATE`; SQLite's `BEGIN IMMEDIATE`
serialises writers instead), so the state it reads cannot change before the caller acts,
and the caller can hand that state straight to `apply_status(..., known=...)`.

`FOR NO KEY UPDATE`, as every lock taken on a message row to update it without changing a
key: it excludes every other writer of the row, and lets through the key-share lock that
PostgreSQL takes on a message for the foreign key of each event, attempt or callback row
written for it. With `FOR UPDATE`, a bulk cancel writing its refusal for a message being
sent (an event, so a key-share lock) held up the drain recording that message's answer,
which then held up the cancel's next refusal: a deadlock. (A requeue gives the message a
new correlation id, a unique key: it locks `FOR UPDATE`, as that write would anyway.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Attempt, Message
from app.repo.sql import still_null, unindexed

_messages = cast(Table, Message.__table__)
_attempts = cast(Table, Attempt.__table__)


@dataclass(frozen=True, slots=True)
class LockedMessage:
    """A message row as it is under our lock: who it is and where it stands."""

    id: int
    cycle: int
    status: Status
    attempt: int
    provider_message_id: str | None

    @property
    def state(self) -> tuple[Status, int, int]:
        """(status, cycle, attempt), the `known` state `apply_status` takes."""
        return self.status, self.cycle, self.attempt


_COLUMNS = (
    _messages.c.id,
    _messages.c.cycle,
    _messages.c.status,
    _messages.c.attempt,
    _messages.c.provider_message_id,
)


def _locked(row: Sequence[Any]) -> LockedMessage:
    message_id, cycle, status, attempt, provider_message_id = row
    return LockedMessage(message_id, cycle, Status(status), attempt, provider_message_id)


def _select_locked(*where: Any) -> Any:
    return select(*_COLUMNS).where(*where).with_for_update(key_share=True)


# Built once, with bound parameters: the webhook's hot path runs them for every status.
# The identity is compared unindexed: the provider id's index must drive (see `unindexed`).
_BY_PROVIDER_ID = _select_locked(
    unindexed(_messages.c.identity_id) == bindparam("identity_id_"),
    _messages.c.provider_message_id == bindparam("provider_message_id_"),
)
_OF_IDENTITY = _select_locked(
    _messages.c.id == bindparam("message_id_"),
    _messages.c.identity_id == bindparam("identity_id_"),
)
_BY_ATTEMPT = (
    select(_attempts.c.cycle, *_COLUMNS)
    .join(_messages, _messages.c.id == _attempts.c.message_id)
    .where(
        _attempts.c.provider_message_id == bindparam("provider_message_id_"),
        unindexed(_messages.c.identity_id) == bindparam("identity_id_"),
    )
    .order_by(_attempts.c.cycle.desc())
    .limit(1)
    .with_for_update(of=_messages, key_share=True)
)


def lock_message_by_provider_id(
    session: Session, identity_id: int, provider_message_id: str
) -> LockedMessage | None:
    """The identity's message the provider knows by this id (the current cycle's id)."""
    row = session.execute(
        _BY_PROVIDER_ID,
        {"identity_id_": identity_id, "provider_message_id_": provider_message_id},
    ).first()
    return None if row is None else _locked(row)


def lock_message_of_identity(
    session: Session, message_id: int, identity_id: int
) -> LockedMessage | None:
    """A message by our id, only if it belongs to this identity (never another tenant's)."""
    row = session.execute(
        _OF_IDENTITY, {"message_id_": message_id, "identity_id_": identity_id}
    ).first()
    return None if row is None else _locked(row)


def lock_message_by_attempt(
    session: Session, identity_id: int, provider_message_id: str
) -> tuple[int, LockedMessage] | None:
    """(the attempt's cycle, its message) for a provider id only an attempt recorded: an
    earlier cycle's, or this cycle's from an attempt whose lease was lost before it wrote
    the id on the message. The latest cycle first."""
    row = session.execute(
        _BY_ATTEMPT, {"identity_id_": identity_id, "provider_message_id_": provider_message_id}
    ).first()
    if row is None:
        return None
    return row[0], _locked(row[1:])


def record_provider_id(
    session: Session,
    message_id: int,
    cycle: int,
    provider_message_id: str,
    had_it_at: datetime | None = None,
) -> None:
    """Write the provider id on the message if this cycle has none yet (never overwrite).

    `had_it_at`: when the provider's own clock says it had the message (the status that
    names it). Its call's start is not known yet (the answer was lost, or is late): this
    stands in for it, so a watermark of the provider's at or after that instant covers it;
    the worker's record of the call replaces it with the call's real start."""
    values: dict[str, object] = {"provider_message_id": provider_message_id}
    if had_it_at is not None:
        values["request_started_ms"] = func.coalesce(
            _messages.c.request_started_ms, int(had_it_at.timestamp() * 1000)
        )
    session.execute(
        update(_messages)
        .where(
            _messages.c.id == message_id,
            _messages.c.cycle == cycle,
            still_null(_messages.c.provider_message_id),
        )
        .values(values)
    )
