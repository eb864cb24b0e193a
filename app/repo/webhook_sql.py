"""The webhook's hot path on PostgreSQL: each of its two transactions in one statement.

A single-status delivery is the common case (WhatsApp sends one status a delivery), and
on PostgreSQL each of its transactions can be one statement with data-modifying CTEs,
sent outside a transaction so that PostgreSQL commits it as it runs (no BEGIN, no COMMIT:
`Database.autocommit`); where the apply finds that what it did must not stand, it calls
`ratchet_abort` (migration 0010) and PostgreSQL undoes the whole statement:

    record_one_status   the raw delivery and its one status row (deduplicated by key)
    apply_by_provider_id
      (`app/repo/webhook_sql_apply.py`)
                        for a status whose provider id names a message of its identity:
                        lock the message, append the event with its outcome (deduplicated
                        by key), apply the move (or fill a late status's own timestamp),
                        and claim and finish the status row

They do what the general path does (`app/repo/inbox.py`, `app/repo/matching.py`,
`app/repo/transitions.py`), in the same order and under the same locks: the message row is
locked first (`cur`), the status row is updated only after (its statement waits on
`cur`). The state machine still decides: `decide` (`app/lifecycle.py`) is asked for every
state the message could be in, and its answers are written into the statement, which picks
the one for the state it finds under the lock. Every sub-statement sees the same snapshot;
each later one reads only what an earlier one returned (never its table), and the message
row is updated by at most one of them, so none needs to see another's effects. The updates
find their rows by id alone (see `_build_apply`): a row another writer changed while `cur`
waited for its lock is then updated in its newest version, the one `cur` decided on.

Anything else (several statuses, inbound messages, a status no message has the provider id
of, SQLite) goes the general way; `app/reconcile.py` chooses.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, exists, insert, literal_column, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from app.models import Identity, WebhookDelivery, WebhookStatus
from app.repo.inbox import IncomingStatus, StoredStatus, status_payload, stored_status
from app.repo.sql import DriverStatement

_deliveries = cast(Table, WebhookDelivery.__table__)
_statuses = cast(Table, WebhookStatus.__table__)
_identities = cast(Table, Identity.__table__)


# The raw delivery and its one status ------------------------------------------------


def _build_record(checked: bool) -> Any:
    """`checked`: insert nothing unless identity `c_identity_id` still has the sealed app
    secret `c_sealed` (the one the delivery was verified with, as this process remembered
    it; see `RememberedRouting`)."""
    delivery_values = {
        "provider": bindparam("d_provider", type_=_deliveries.c.provider.type),
        "identity_id": bindparam("d_identity_id", type_=_deliveries.c.identity_id.type),
        "headers": bindparam("d_headers", type_=_deliveries.c.headers.type),
        "body": bindparam("d_body", type_=_deliveries.c.body.type),
        "received_at": bindparam("now", type_=_deliveries.c.received_at.type),
    }
    rows = select(*delivery_values.values())
    if checked:
        rows = rows.where(
            exists(
                select(_identities.c.id).where(
                    _identities.c.id == bindparam("c_identity_id", type_=_identities.c.id.type),
                    _identities.c.app_secret_encrypted
                    == bindparam("c_sealed", type_=_identities.c.app_secret_encrypted.type),
                )
            )
        )
    delivery = (
        insert(_deliveries)
        .from_select(list(delivery_values), rows)
        .returning(_deliveries.c.id)
        .cte("d")
    )
    values = {
        "delivery_id": delivery.c.id,
        **{
            name: bindparam(f"s_{name}", type_=_statuses.c[name].type)
            for name in (
                "provider",
                "identity_id",
                "routing_id",
                "dedupe_key",
                "provider_message_id",
                "correlation_id",
                "status",
                "provider_time",
                "payload",
            )
        },
        "received_at": bindparam("now", type_=_statuses.c.received_at.type),
        "tries": literal_column("0"),
    }
    status = (
        pg_insert(_statuses)
        .from_select(list(values), select(*values.values()))
        .on_conflict_do_nothing(index_elements=["dedupe_key"])
        .returning(_statuses.c.id)
        .cte("s")
    )
    return select(delivery.c.id, select(status.c.id).scalar_subquery())


_RECORD = DriverStatement(_build_record(checked=False))
_RECORD_CHECKED = DriverStatement(_build_record(checked=True))


def record_one_status(
    session: Session | Connection,
    *,
    provider: str,
    identity_id: int | None,
    headers: dict[str, str],
    body: str,
    now: datetime,
    status: IncomingStatus,
    still_sealed: tuple[int, str] | None = None,
) -> tuple[int, StoredStatus | None] | None:
    """Insert the raw delivery and its one status (under a known identity) in one
    statement: (the delivery's id, the stored status to apply, or None: a duplicate).

    With `still_sealed` (an identity id and the sealed app secret the delivery was
    verified with), only if that identity still has that secret: None, and nothing
    inserted, when it does not."""
    assert status.identity_id is not None
    payload = status_payload(status)
    dedupe_key = status.dedupe_key
    checks = {}
    if still_sealed is not None:
        checks = {"c_identity_id": still_sealed[0], "c_sealed": still_sealed[1]}
    row = (
        (_RECORD if still_sealed is None else _RECORD_CHECKED)
        .execute(
            session,
            {
                **checks,
                "d_provider": provider,
                "d_identity_id": identity_id,
                "d_headers": headers,
                "d_body": body,
                "now": now,
                "s_provider": status.provider,
                "s_identity_id": status.identity_id,
                "s_routing_id": status.routing_id,
                "s_dedupe_key": dedupe_key,
                "s_provider_message_id": status.provider_message_id,
                "s_correlation_id": status.correlation_id,
                "s_status": status.status,
                "s_provider_time": status.provider_time,
                "s_payload": payload,
            },
        )
        .first()
    )
    if row is None:
        return None
    delivery_id, status_id = row
    if status_id is None:
        return int(delivery_id), None
    return int(delivery_id), stored_status(status_id, status, payload)
