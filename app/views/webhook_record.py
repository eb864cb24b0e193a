"""A Meta delivery verified with the identities it names and recorded, before any of its
statuses is applied (steps 2 and 3 of `app/views/webhooks.py`).

    verify_and_record               the one call the view makes
      record_with_remembered_routing
                                    the fast path: one status of one number (WhatsApp's
                                    usual delivery), verified with the identity this
                                    process remembers, no lookup, one statement
      _record_looked_up             otherwise, or where the fast path did not do: the
                                    identities looked up (twice at most), then recorded
    _store                          verify, then record: one statement or a transaction
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import current_app, jsonify
from flask.typing import ResponseReturnValue

from app.clock import utcnow
from app.db import Database
from app.providers.base import Provider, WebhookBatch, WebhookFormatError
from app.reconcile import (
    InboundMessage,
    RawDelivery,
    Recorded,
    StatusesRefusedError,
    keep_raw_delivery,
    record_delivery,
    record_single_status,
    recorded_in_one_statement,
)
from app.repo.inbox import IncomingStatus
from app.repo.routing import RememberedRouting, RoutedIdentity, routed_identities
from app.repo.watermarks import watermark_statuses
from app.views.webhook_values import WINDOW_RECIPIENT, incoming_statuses, storable_statuses
from app.views.webhook_values import fits as _fits
from app.views.webhook_verify import refused as _refused
from app.views.webhook_verify import verified as _verified

# The webhook view's log, as it always was.
log = logging.getLogger("app.views.webhooks")


@dataclass(frozen=True, slots=True)
class Arrival:
    """A delivery as it came: parsed, not yet verified."""

    provider: Provider
    raw: bytes
    headers: dict[str, str]
    routing_ids: list[str]
    batch: WebhookBatch | None
    payload: dict[str, Any]
    not_understood: WebhookFormatError | None = None  # why `batch` is None

    def one_plain_status(self) -> bool:
        """One number, one status, and nothing else."""
        batch = self.batch
        return (
            len(self.routing_ids) == 1
            and batch is not None
            and len(batch.statuses) == 1
            and not batch.inbound
            and not batch.watermarks
        )


@dataclass(frozen=True, slots=True)
class Stored:
    recorded: Recorded
    unstorable: int  # statuses with values no real one has, kept in the raw body alone
    now: datetime


class NotVerified:
    """`_store` with remembered identities: the signature does not verify with them."""


NOT_VERIFIED = NotVerified()


def remembered_routing() -> RememberedRouting:
    """The identities this app last read for each routing id (see `RememberedRouting`)."""
    memory: RememberedRouting = current_app.extensions.setdefault(
        "ratchet.routing", RememberedRouting()
    )
    return memory


def verify_and_record(
    db: Database, arrived: Arrival
) -> tuple[Stored | ResponseReturnValue, dict[str, RoutedIdentity]]:
    """Verify the delivery with the identities it names and record it: with the identity
    this process remembers where it can, else with the identities looked up. Returns what
    was stored, or the answer when that is all there is to say (401; 202 for statuses the
    database refused), with the identities by routing id."""
    stored, remembered = record_with_remembered_routing(db, arrived)
    if isinstance(stored, Stored):
        assert remembered is not None
        return stored, {arrived.routing_ids[0]: remembered}
    return _record_looked_up(db, arrived, stored, remembered)


def record_with_remembered_routing(
    db: Database, arrived: Arrival
) -> tuple[Stored | NotVerified | ResponseReturnValue | None, RoutedIdentity | None]:
    """The fast path. One status of one number, WhatsApp's usual delivery: verified with
    the identity this process remembers, and recorded (one statement, PostgreSQL) only if
    it still has that secret. Returns (what `_store` made of it, the remembered identity):
    (None, None) when not taken (not such a delivery, not PostgreSQL, nothing remembered);
    `NOT_VERIFIED` when the signature does not verify with the remembered secret; None
    when it did not do (the secret was set again, or the statuses were refused)."""
    if not (db.postgresql and arrived.one_plain_status()):
        return None, None
    remembered = remembered_routing().get(arrived.provider.name, arrived.routing_ids[0])
    if remembered is None:
        return None, None
    by_route = {arrived.routing_ids[0]: remembered}
    return _store(db, arrived, by_route, remembered=True), remembered


def _record_looked_up(
    db: Database,
    arrived: Arrival,
    stored: NotVerified | ResponseReturnValue | None,
    remembered: RoutedIdentity | None,
) -> tuple[Stored | ResponseReturnValue, dict[str, RoutedIdentity]]:
    """Looked up: nothing remembered, or what was remembered did not do. Twice at most: the
    record also checks the secret it was verified with, and a secret set again between
    a lookup and the record makes that lookup's verdict void."""
    provider, routing_ids = arrived.provider, arrived.routing_ids
    answer: Stored | NotVerified | ResponseReturnValue | None = stored
    by_route: dict[str, RoutedIdentity] = {}
    for _ in range(2):
        if answer is not None and not isinstance(answer, NotVerified):
            break
        with db.autocommit() as connection:  # one read
            by_route = routed_identities(connection, provider.name, routing_ids)
        remembered_routing().keep(provider.name, by_route)
        if isinstance(answer, NotVerified) and list(by_route.values()) == [remembered]:
            # The same sealed secret that just failed to verify it: no second check.
            answer = _refused(provider, known=True)
        else:
            answer = _store(db, arrived, by_route, remembered=False)
    if answer is None or isinstance(answer, NotVerified):
        return _refused(provider, known=True), by_route
    return answer, by_route


def _store(
    db: Database, arrived: Arrival, by_route: dict[str, RoutedIdentity], *, remembered: bool
) -> Stored | NotVerified | ResponseReturnValue | None:
    """Verify the delivery against the identities it names and record it, with its
    statuses, before any is applied: as one statement committed on its own for the usual
    single status (PostgreSQL), else in a transaction. An answer (401, or 202 for
    statuses the database refused) when that is all there is to say.

    The one-statement record also checks that the identity still has the secret that
    verified the delivery: None (nothing stored; look it up again) where it does not.
    `remembered`: `by_route` is this app's memory, not a lookup. Then NOT_VERIFIED where
    the signature does not verify with it, and None (nothing stored, look the identities
    up) where the delivery is not one plain status or the database refused it."""
    provider, batch = arrived.provider, arrived.batch
    known = list(by_route.values())
    if not known or not _verified(provider, arrived.raw, arrived.headers, known):
        if remembered:
            return NOT_VERIFIED
        return _refused(provider, known=bool(known))
    unknown = [rid for rid in arrived.routing_ids if rid not in by_route]
    if unknown:
        log.warning("%s webhook names unknown identities %s", provider.name, unknown)
    now = utcnow()
    # The delivery belongs to its identity when it names one; one naming several (one
    # app's secret shared by several numbers or Pages, maybe several tenants') belongs to
    # none, so no message page shows its whole body.
    owner = known[0].id if len(known) == 1 else None
    ids = {rid: identity.id for rid, identity in by_route.items()}
    incoming: list[IncomingStatus] = []
    unstorable = 0
    inbound: list[InboundMessage] = []
    if batch is not None:
        incoming, unstorable = storable_statuses(incoming_statuses(provider, batch, ids))
        inbound = [
            InboundMessage(ids[item.routing_id], item.sender, item.provider_time)
            for item in batch.inbound
            if item.routing_id in ids and _fits(item.sender, WINDOW_RECIPIENT)
        ]
    watermarks = batch.watermarks if batch is not None else []
    body = arrived.raw.decode("utf-8")
    one_statement = (
        db.postgresql and not watermarks and recorded_in_one_statement(incoming, inbound)
    )
    if remembered and not one_statement:
        return None
    try:
        if one_statement:
            raw_delivery = RawDelivery(provider.name, owner, arrived.headers, body, now)
            sealed = known[0].app_secret_encrypted
            assert sealed is not None  # it verified the delivery
            with db.autocommit() as connection:
                recorded = record_single_status(
                    connection, raw_delivery, incoming[0], still_sealed=(known[0].id, sealed)
                )
            if recorded is None:  # its secret was set again since it was read
                remembered_routing().forget(provider.name, arrived.routing_ids[0])
                return None
        else:
            with db.transaction() as session:
                if watermarks:
                    # Messenger's receipts without mids: the covered messages of each thread.
                    incoming += watermark_statuses(session, provider.name, watermarks, ids)
                recorded = record_delivery(
                    session,
                    provider=provider.name,
                    identity_id=owner,
                    headers=arrived.headers,
                    body=body,
                    now=now,
                    statuses=incoming,
                    inbound=inbound,
                )
    except StatusesRefusedError as refused:
        if remembered:
            # Kept raw below only after a fresh lookup verified it: the refused statement
            # could not check the secret.
            return None
        # Signed, but the database refuses its statuses: the raw delivery is kept on its
        # own, and a 2xx all the same, or Meta would redeliver it for ever.
        kept = keep_raw_delivery(db, refused)
        return jsonify(received=0, stored=kept, error="statuses could not be stored"), 202
    return Stored(recorded, unstorable, now)
