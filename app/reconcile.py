"""The reconciler: one provider status, from the webhook view to the state machine.

Read it top-down; the steps come in the order DESIGN section 6 lists them. This module
holds the entry points, which own the transactions; the steps of one status take the
caller's session and live in the repo layer, where the worker runs them too.

    watermark_statuses  (Messenger, Instagram) a watermark becomes one status per covered
                        message, under its provider id, before anything is stored (1c;
                        `app/repo/watermarks.py`)
    record_delivery     the raw delivery, its statuses and inbound windows, one commit
    apply_recorded      each status in its own transaction (a failure: the sweeper replays)
      apply_stored_status                                   (`app/repo/status_apply.py`)
        1. match        by provider id; by our correlation id; (by watermark); by an attempt
        2. adopt        this cycle's provider id onto the message; two ids: a double send
                        (steps 1 and 2: `app/repo/status_match.py`)
        3. claim        the status row, so two appliers cannot both apply it (in a
                        transaction of its own: one compare-and-set with step 6)
        4. park         no message yet (or none with an attempt in that cycle), or stale:
                        an earlier cycle's id, recorded on its own cycle and not applied
        5. apply        through the guard: `apply_status`, which asks `app/lifecycle.py`
        6. record       the status row's result
    apply_parked        the worker recording a provider id applies what arrived before it
                        (`app/repo/status_apply.py`)

Every webhook view (WhatsApp, Twilio, Messenger and Instagram) verifies the
delivery, turns its statuses into `IncomingStatus` values, and calls `record_delivery` in
the transaction that found its identities, then `apply_recorded`, both on the request's one
connection (`request_db`); if the database refuses the statuses, `keep_raw_delivery` keeps
the raw delivery alone. The sweeper replays unapplied statuses through `apply_webhook_status`
(`app/repo/status_apply.py`).

On PostgreSQL the common case takes a shorter road with the same steps: one status of a
known number is recorded with its raw delivery in one statement (`app/repo/webhook_sql.py`),
and a status whose provider id names a message is applied (1a, 3, 5 and 6) in one more
(`app/repo/webhook_sql_apply.py`), each committed by itself (no BEGIN, no COMMIT); anything
else, or a status that statement finds no message for, goes step by step in transactions.

Lock order, everywhere: the message row first, then the status row. The worker that
records a provider id holds the message row and then applies the parked statuses; a status
matched here locks the message row (step 1) before claiming itself (step 3). So the two
cannot deadlock, and with the sweeper retrying parked statuses, cannot miss each other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from app.db import Database
from app.repo.inbox import (
    IncomingStatus,
    Result,
    StatusTakenError,
    StoredStatus,
    store_delivery,
    store_new_statuses,
)
from app.repo.sql import is_postgresql
from app.repo.status_apply import (
    apply_matched_by_provider_id,
    apply_stored_status,
    one_statement_applies,
)
from app.repo.webhook_sql import record_one_status
from app.repo.windows import open_window

log = logging.getLogger(__name__)


# The entry points for the webhook views --------------------------------------------


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A customer wrote in: it opens or extends their 24-hour window on that identity."""

    identity_id: int
    sender: str
    provider_time: datetime


@dataclass(slots=True)
class Recorded:
    """What `record_delivery` stored: the statuses to apply, and what it counted."""

    delivery_id: int
    to_apply: list[StoredStatus] = field(default_factory=list)
    duplicates: int = 0
    unmatched: int = 0  # under a number we do not know: stored finished


@dataclass(frozen=True, slots=True)
class RawDelivery:
    """A verified delivery as it is stored: who sent it, and exactly what they sent."""

    provider: str
    identity_id: int | None
    headers: dict[str, str]
    body: str
    now: datetime


# What the database says about the values it was given (too long, not valid JSON, a NUL,
# a constraint): storing them again would fail again. Anything else (OperationalError:
# the connection lost, a deadlock, a statement timeout; InterfaceError; InternalError) is
# about the database, not the delivery.
REFUSALS = (DataError, IntegrityError)


class StatusesRefusedError(Exception):
    """The database refused a delivery's statuses: the caller's transaction is spoiled.
    Roll it back and keep the raw delivery alone: `keep_raw_delivery(db, error)`."""

    def __init__(self, reason: str, delivery: RawDelivery) -> None:
        super().__init__(reason)
        self.delivery = delivery


def keep_raw_delivery(db: Database, refused: StatusesRefusedError) -> int:
    """The raw delivery whose statuses the database refused, kept on its own in a
    transaction of its own (so nothing a provider signed is lost); returns its id. The
    caller still answers 2xx, or the provider would redeliver it for ever; a person reads
    the statuses from the raw body."""
    raw = refused.delivery
    with db.transaction() as session:
        kept = record_delivery(
            session,
            provider=raw.provider,
            identity_id=raw.identity_id,
            headers=raw.headers,
            body=raw.body,
            now=raw.now,
        )
    log.error(
        "%s delivery %s kept, statuses not stored: %s", raw.provider, kept.delivery_id, refused
    )
    return kept.delivery_id


def record_delivery(
    session: Session,
    *,
    provider: str,
    identity_id: int | None,
    headers: dict[str, str],
    body: str,
    now: datetime,
    statuses: Sequence[IncomingStatus] = (),
    inbound: Iterable[InboundMessage] = (),
) -> Recorded:
    """Keep a verified delivery: the raw body, its statuses (unapplied, deduplicated by key)
    and the windows its inbound messages open, committed with the caller's transaction.

    If the database refuses the statuses (a value no real provider sends), this raises
    `StatusesRefusedError`: the caller rolls back and stores the raw delivery on its own
    (`keep_raw_delivery`), so it is kept either way. Only a refusal of the values does
    (`REFUSALS`): a lost connection, a deadlock or a timeout says nothing about them, and
    propagates, so the delivery goes unacknowledged and the provider sends it again (kept
    raw and answered 2xx, its statuses would never be stored or applied).
    (Optimistic, instead of a savepoint around the statuses: the savepoint cost every
    delivery two statements to cover what almost never happens.) On PostgreSQL, one status
    of a known number and nothing else (WhatsApp's usual delivery) is stored with its raw
    delivery in one statement.
    """
    inbound = list(inbound)
    if recorded_in_one_statement(statuses, inbound) and is_postgresql(session):
        # The common case, one status of a known number: one statement on PostgreSQL.
        raw = RawDelivery(provider, identity_id, headers, body, now)
        recorded = record_single_status(session, raw, statuses[0])
        assert recorded is not None  # unchecked: it always stores
        return recorded
    delivery_id = store_delivery(session, provider, identity_id, headers, body, now)
    recorded = Recorded(delivery_id)
    if not statuses and not inbound:
        return recorded
    try:
        to_apply, duplicates = store_new_statuses(session, delivery_id, list(statuses), now)
        # Sorted for the reason the statuses are: one lock order for every delivery.
        for item in sorted(inbound, key=lambda item: (item.identity_id, item.sender)):
            open_window(session, item.identity_id, item.sender, item.provider_time)
    except REFUSALS as exc:
        raw = RawDelivery(provider, identity_id, headers, body, now)
        raise StatusesRefusedError(_reason(exc), raw) from exc
    recorded.to_apply = to_apply
    recorded.duplicates = duplicates
    recorded.unmatched = len(statuses) - duplicates - len(to_apply)
    return recorded


def record_single_status(
    session: Session | Connection,
    raw: RawDelivery,
    status: IncomingStatus,
    still_sealed: tuple[int, str] | None = None,
) -> Recorded | None:
    """`record_delivery` of a delivery that is one status of a known number and nothing
    else, in one statement (PostgreSQL), so it may run as a transaction of its own
    (`Database.autocommit`). Raises `StatusesRefusedError` as `record_delivery` does.
    With `still_sealed` (the identity and the sealed secret the delivery was verified
    with), nothing is stored, and None returned, if the identity's secret has changed."""
    try:
        done = record_one_status(
            session,
            provider=raw.provider,
            identity_id=raw.identity_id,
            headers=raw.headers,
            body=raw.body,
            now=raw.now,
            status=status,
            still_sealed=still_sealed,
        )
    except REFUSALS as exc:
        raise StatusesRefusedError(_reason(exc), raw) from exc
    if done is None:
        return None
    delivery_id, stored = done
    if stored is None:
        return Recorded(delivery_id, duplicates=1)
    return Recorded(delivery_id, to_apply=[stored])


def recorded_in_one_statement(
    statuses: Sequence[IncomingStatus], inbound: Sequence[InboundMessage]
) -> bool:
    """A delivery `record_delivery` stores in one statement on PostgreSQL (so it may run
    as a transaction of its own, `Database.autocommit`): one status of a known number and
    nothing else, WhatsApp's usual delivery."""
    return len(statuses) == 1 and not inbound and statuses[0].identity_id is not None


def _reason(exc: DBAPIError) -> str:
    return str(exc.orig) if exc.orig else str(exc)


def apply_recorded(db: Database, recorded: Recorded, now: datetime) -> dict[str, int]:
    """Apply each recorded status in its own transaction; counts by result.

    A status that fails to apply stays unapplied (counted `unapplied`): the sweeper
    replays it. Duplicates and unmatched statuses of the delivery are counted too.
    """
    counts: dict[str, int] = {Result.DUPLICATE: recorded.duplicates}
    if recorded.unmatched:
        counts[Result.UNMATCHED] = recorded.unmatched
    for status in recorded.to_apply:
        try:
            result = apply_on_its_own(db, status, now)
        except StatusTakenError:
            result = Result.DUPLICATE  # another applier finished it first; ours rolled back
        except Exception:
            log.exception(
                "status %s could not be applied now; the sweeper will replay it", status.id
            )
            result = "unapplied"
        counts[result] = counts.get(result, 0) + 1
    return counts


def apply_on_its_own(db: Database, status: StoredStatus, now: datetime) -> str:
    """One stored status in a transaction of its own (the caller counts `StatusTakenError`).

    On PostgreSQL a status that moves a message and names a provider id is first tried as
    the one statement (`apply_matched_by_provider_id`), committed by itself with no BEGIN
    or COMMIT around it; it undoes itself where it must not stand. Where it finds no
    message, nothing was written, and the steps run in a transaction.
    """
    if db.postgresql and one_statement_applies(status):
        with db.autocommit() as connection:
            done = apply_matched_by_provider_id(connection, status, now)
        if done is not None:
            return done
    with db.transaction() as session:
        return apply_stored_status(session, status, now, own_transaction=True)
