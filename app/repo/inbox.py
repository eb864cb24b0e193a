"""The webhook inbox: raw deliveries and their statuses, stored before anything is applied.

Each status is stored once (its dedupe key: provider, identity, provider id, status), and
stays unapplied until the reconciler (`app/reconcile.py`) applies, refuses or parks it.
A status under a number we do not know (in a delivery another number's secret verified)
has no identity: it is stored verbatim, already finished as `unmatched`, so nothing ever
tries to match it to a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ARRAY, Select, String, Table, any_, bindparam, case, or_, select, update
from sqlalchemy.orm import Session

from app.models import Identity, WebhookDelivery, WebhookStatus
from app.repo.sql import DriverStatement, insert_ignoring_conflict, rows_changed, still_null


class Result:
    APPLIED = "applied"
    REFUSED = "refused"
    DUPLICATE = "duplicate"
    PARKED = "parked"
    STALE = "stale"  # the provider id belongs to an earlier cycle: recorded, not applied
    IGNORED = "ignored"  # a provider status below `sent`, or one we do not track
    EXPIRED = "expired"  # parked too long: no message ever matched
    UNMATCHED = "unmatched"  # under a number we do not know: kept, never matched


@dataclass(frozen=True, slots=True)
class IncomingStatus:
    """One status to store; `identity_id` None means its routing id names no identity."""

    identity_id: int | None
    provider: str
    provider_message_id: str
    status: str
    provider_time: datetime | None
    correlation_id: str | None = None
    errors: tuple[dict[str, Any], ...] = ()
    failure_class: str | None = None
    raw: dict[str, Any] | None = None
    routing_id: str | None = None

    def __post_init__(self) -> None:
        if self.identity_id is None and self.routing_id is None:
            raise ValueError("a status without an identity needs the routing id it came under")

    @property
    def dedupe_key(self) -> str:
        # Scoped to the identity: another tenant naming our provider id cannot shadow ours.
        # Without one, to the routing id (`route=` cannot collide with a numeric identity id).
        scope = self.identity_id if self.identity_id is not None else f"route={self.routing_id}"
        return f"{self.provider}:{scope}:{self.provider_message_id}:{self.status}"


@dataclass(frozen=True, slots=True)
class StoredStatus:
    """A stored, not yet finished status, as the reconciler reads it: the row's values."""

    id: int
    identity_id: int | None
    provider: str
    provider_message_id: str | None
    status: str
    provider_time: datetime | None
    correlation_id: str | None
    dedupe_key: str
    payload: dict[str, Any]


def status_payload(status: IncomingStatus) -> dict[str, Any]:
    """What a status row keeps of the provider's words beside its columns."""
    return {
        "raw": status.raw,
        "errors": list(status.errors),
        "failure_class": status.failure_class,
    }


def stored_status(status_id: int, status: IncomingStatus, payload: dict[str, Any]) -> StoredStatus:
    """The row just inserted for `status`, as the reconciler reads it (no read back)."""
    return StoredStatus(
        id=status_id,
        identity_id=status.identity_id,
        provider=status.provider,
        provider_message_id=status.provider_message_id,
        status=status.status,
        provider_time=status.provider_time,
        correlation_id=status.correlation_id,
        dedupe_key=status.dedupe_key,
        payload=payload,
    )


_statuses = cast(Table, WebhookStatus.__table__)
_deliveries = cast(Table, WebhookDelivery.__table__)


def store_delivery(
    session: Session,
    provider: str,
    identity_id: int | None,
    headers: dict[str, str],
    body: str,
    now: datetime,
) -> int:
    return int(
        session.execute(
            _INSERT_DELIVERY,
            {
                "provider": provider,
                "identity_id": identity_id,
                "headers": headers,
                "body": body,
                "received_at": now,
            },
        ).scalar_one()
    )


def load_status(session: Session, status_id: int) -> StoredStatus | None:
    """A status still to apply (None if it does not exist or is finished)."""
    row = session.execute(
        select(
            _statuses.c.id,
            _statuses.c.identity_id,
            _statuses.c.provider,
            _statuses.c.provider_message_id,
            _statuses.c.status,
            _statuses.c.provider_time,
            _statuses.c.correlation_id,
            _statuses.c.dedupe_key,
            _statuses.c.payload,
        ).where(_statuses.c.id == status_id, still_null(_statuses.c.applied_at))
    ).first()
    return None if row is None else StoredStatus(*row)


def store_statuses(
    session: Session, delivery_id: int, statuses: list[IncomingStatus], now: datetime
) -> tuple[list[int], int]:
    """Insert each status once; returns the ids of the new rows to apply (in the order
    given) and how many were duplicates. New unmatched rows (no identity) are stored
    finished, so they are in neither: given - duplicates - len(ids) of them were stored.
    """
    stored, duplicates = store_new_statuses(session, delivery_id, statuses, now)
    return [status.id for status in stored], duplicates


def store_new_statuses(
    session: Session, delivery_id: int, statuses: list[IncomingStatus], now: datetime
) -> tuple[list[StoredStatus], int]:
    """`store_statuses`, returning the new rows to apply with their values, so the caller
    can apply them without reading them back."""
    # One order for every delivery: two deliveries inserting the same keys in opposite
    # orders would each hold the unique-index entry the other waits for (a deadlock).
    order = sorted(range(len(statuses)), key=lambda i: statuses[i].dedupe_key)
    new: dict[int, StoredStatus] = {}
    duplicates = 0
    for index in order:
        status = statuses[index]
        unmatched = status.identity_id is None
        dedupe_key = status.dedupe_key
        payload = status_payload(status)
        status_id = insert_ignoring_conflict(
            session,
            _statuses,
            {
                "delivery_id": delivery_id,
                "provider": status.provider,
                "identity_id": status.identity_id,
                "routing_id": status.routing_id,
                "dedupe_key": dedupe_key,
                "provider_message_id": status.provider_message_id,
                "correlation_id": status.correlation_id,
                "status": status.status,
                "provider_time": status.provider_time,
                "received_at": now,
                "payload": payload,
                "tries": 0,
                # Finished on arrival: the sweeper's replay and expiry skip it for good.
                "applied_at": now if unmatched else None,
                "result": Result.UNMATCHED if unmatched else None,
            },
            ["dedupe_key"],
        )
        if status_id is None:
            duplicates += 1
        elif not unmatched:
            new[index] = stored_status(status_id, status, payload)
    return [new[index] for index in sorted(new)], duplicates


# Built once, with bound parameters: every status of every delivery runs them.
_INSERT_DELIVERY = _deliveries.insert().returning(_deliveries.c.id)
_CLAIM = (
    update(_statuses)
    .where(_statuses.c.id == bindparam("status_id"), still_null(_statuses.c.applied_at))
    .values(tries=_statuses.c.tries + 1)
)
_FINISH = update(_statuses).where(_statuses.c.id == bindparam("status_id"))
_CLAIM_AND_FINISH = (
    update(_statuses)
    .where(_statuses.c.id == bindparam("status_id"), still_null(_statuses.c.applied_at))
    .values(tries=_statuses.c.tries + 1)
)


def claim_status(session: Session, status_id: int) -> bool:
    """Take an unfinished status for applying: of two appliers, one gets it."""
    return rows_changed(session, _CLAIM, {"status_id": status_id}) == 1


def finish_status(
    session: Session,
    status_id: int,
    applied_at: datetime | None,
    result: str,
    message_id: int | None,
) -> None:
    session.execute(
        _FINISH,
        {
            "status_id": status_id,
            "applied_at": applied_at,
            "result": result,
            "message_id": message_id,
        },
    )


# Built once: every accepted send runs it (building it per call cost a third of a millisecond
# of CPU, about a twentieth of a send's). It names the identity's provider, which every
# status of that identity was stored under, so that the (provider, provider id) index
# drives it: without it, the only way in was the index of unapplied statuses, and a send
# read every status parked on the installation (other senders' on a shared number wait
# there for days).
_identities = cast(Table, Identity.__table__)


def _parked(provider_ids: Any) -> Select[tuple[int]]:
    """The unapplied statuses of one identity whose provider id passes `provider_ids`, in
    the order they are applied."""
    return (
        select(_statuses.c.id)
        .where(
            _statuses.c.provider
            == select(_identities.c.provider)
            .where(_identities.c.id == bindparam("identity_id_"))
            .scalar_subquery(),
            provider_ids,
            _statuses.c.identity_id == bindparam("identity_id_"),
            still_null(_statuses.c.applied_at),
        )
        .order_by(_statuses.c.provider_time, _statuses.c.id)
    )


_PARKED = DriverStatement(
    _parked(_statuses.c.provider_message_id == bindparam("provider_message_id_"))
)
# A drain's batch of acceptances asks for all its ids at once (PostgreSQL: `accept_many`).
_PARKED_ANY = _parked(
    _statuses.c.provider_message_id == any_(bindparam("provider_message_ids_", type_=ARRAY(String)))
)


def parked_status_ids(session: Session, identity_id: int, provider_message_id: str) -> list[int]:
    """Run after every accepted send (built once: `DriverStatement`)."""
    params = {"identity_id_": identity_id, "provider_message_id_": provider_message_id}
    return [row[0] for row in _PARKED.execute(session, params).all()]


def parked_status_ids_of(
    session: Session, identity_id: int, provider_message_ids: list[str]
) -> list[int]:
    """`parked_status_ids` for many ids of one identity, in one statement (PostgreSQL)."""
    params = {"identity_id_": identity_id, "provider_message_ids_": provider_message_ids}
    return list(session.scalars(_PARKED_ANY, params))


def pending_status_ids(
    session: Session, now: datetime, parked_window: timedelta, limit: int = 500
) -> list[int]:
    """Statuses to replay: every one whose application failed, and the recently parked.

    A status parks when it beats the send response; the worker applies it when it
    records the id, and this replay covers the short race between the two. Older parked
    ones are mostly other systems' messages (normal): they wait for their id or expire,
    instead of being retried on every pass. The never-applied come first: parked ones
    from other senders on a shared number are normal and can be many, and they must not
    crowd out a status whose application was cut short (a `sent` that answers an unknown
    outcome has to apply before the retry it makes unnecessary). The parked go newest
    first: one that raced its send's record is young, and with more than a pass's worth of
    other senders' statuses parked in the window, oldest first never reached it.
    """
    parked = WebhookStatus.result == Result.PARKED
    parked_last = case((parked, 1), else_=0)
    newest_parked_first = case((parked, -WebhookStatus.id), else_=WebhookStatus.id)
    return list(
        session.scalars(
            select(WebhookStatus.id)
            .where(
                WebhookStatus.applied_at.is_(None),
                or_(
                    WebhookStatus.result.is_(None),
                    WebhookStatus.result != Result.PARKED,
                    WebhookStatus.received_at >= now - parked_window,
                ),
            )
            .order_by(parked_last, newest_parked_first)
            .limit(limit)
        )
    )


def expire_parked(session: Session, now: datetime, max_age: timedelta) -> int:
    """Parked statuses no message ever matched (sends from other systems are normal)."""
    return rows_changed(
        session,
        update(WebhookStatus)
        .where(
            WebhookStatus.applied_at.is_(None),
            WebhookStatus.received_at < now - max_age,
        )
        .values(applied_at=now, result=Result.EXPIRED),
    )


class StatusTakenError(Exception):
    """Another applier finished this status while we applied it: roll ours back."""


def claim_and_finish_status(
    session: Session,
    status_id: int,
    applied_at: datetime | None,
    result: str,
    message_id: int | None,
) -> bool:
    """`claim_status` and `finish_status` in one compare-and-set, for an applier that
    owns its transaction: False if another applier finished the status first (the caller
    then rolls back what it did)."""
    return (
        rows_changed(
            session,
            _CLAIM_AND_FINISH,
            {
                "status_id": status_id,
                "applied_at": applied_at,
                "result": result,
                "message_id": message_id,
            },
        )
        == 1
    )
