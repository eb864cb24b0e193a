"""Webhook endpoints, for the providers. Every correctly signed delivery gets a 2xx, even
with unknown ids and duplicates: a non-2xx makes Meta redeliver the whole batch.

For each delivery:
1. Over 1 MiB: 413, however the body is framed (`app/views/body.py`). Not JSON, or naming
   more numbers than a real delivery does: 400, before any lookup.
2. The identities come from the routing ids alone, in one query; the signature is checked
   over the raw bytes with the secret of the identities that exist, and every one of them
   must share it. Otherwise 401, with one answer whether no number was known or the
   signature did not match, so the endpoint does not tell which numbers exist. A WhatsApp
   delivery naming business accounts and no number (Meta's account, template and quality
   events) goes to `app/views/account_webhooks.py` instead.
3. The raw delivery and its statuses are committed first, together (duplicates dropped by
   key), and inbound messages open their 24-hour windows. Statuses under numbers we do not
   know are kept verbatim and unmatched (refusing them would make Meta resend the batch for
   ever, and the known number's statuses would never apply). A signed delivery we cannot
   parse is kept verbatim and acknowledged (202), so nothing is lost and Meta does not
   resend it. Statuses the database refuses (their values) are kept in the raw body alone,
   also 202; a database that fails instead (the connection lost, a timeout) is a 500, so
   Meta resends the delivery and its statuses are stored then.
4. Each status is then applied in its own transaction; one that fails stays unapplied and
   the sweeper replays it. Steps 3 and 4 are the reconciler's (`app/reconcile.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from app import instruments
from app.clock import utcnow
from app.config import Config
from app.db import Database, get_db, request_db
from app.providers import get_provider
from app.providers.base import Provider, WebhookBatch, WebhookFormatError
from app.providers.whatsapp_account import business_account_ids
from app.reconcile import (
    InboundMessage,
    RawDelivery,
    Recorded,
    StatusesRefusedError,
    apply_recorded,
    keep_raw_delivery,
    record_delivery,
    record_single_status,
    recorded_in_one_statement,
)
from app.repo.identities import identities_with_verify_token
from app.repo.inbox import IncomingStatus
from app.repo.routing import RememberedRouting, RoutedIdentity, routed_identities
from app.repo.watermarks import watermark_statuses
from app.views.account_webhooks import (
    keep_account_changes_beside,
    learn_business_accounts_of,
    receive_account_delivery,
)
from app.views.body import BodyError, kept_headers, parse_json, read_body
from app.views.errors import json_error
from app.views.webhook_values import WINDOW_RECIPIENT, incoming_statuses, storable_statuses
from app.views.webhook_values import fits as _fits
from app.views.webhook_verify import refused as _refused
from app.views.webhook_verify import verified as _verified

log = logging.getLogger(__name__)

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")

# Meta's apps: one app secret, one verify token per identity of these providers.
META_PROVIDERS = {"whatsapp": ("whatsapp",), "messenger": ("messenger", "instagram")}

# A real delivery names a handful of numbers; 100 is far above that, and caps the one
# lookup an unsigned body can make us run.
MAX_ROUTING_IDS = 100

# What a refused delivery's answer says, as the `reason` of ratchet_webhooks_rejected.
REJECTIONS = {400: "malformed", 401: "unverified", 413: "too_large"}


@bp.after_request
def _count_delivery(response: Response) -> Response:
    return count_delivery(response)


def count_delivery(response: Response) -> Response:
    """This process's webhook counters (`/metrics`), for every delivery POSTed to a webhook
    route (`/webhooks/<provider>...`)."""
    if request.method == "POST" and request.url_rule is not None:
        # From the route, not the path: the label takes only the routes' few values.
        provider = request.url_rule.rule.split("/")[2]
        instruments.WEBHOOKS_RECEIVED.labels(provider).inc()
        reason = REJECTIONS.get(response.status_code)
        if reason is not None:
            instruments.WEBHOOKS_REJECTED.labels(provider, reason).inc()
    return response


@bp.get("/whatsapp")
def whatsapp_handshake() -> ResponseReturnValue:
    return _handshake(META_PROVIDERS["whatsapp"])


@bp.post("/whatsapp")
def whatsapp_delivery() -> ResponseReturnValue:
    return receive(get_provider("whatsapp"))


@bp.get("/messenger")
def messenger_handshake() -> ResponseReturnValue:
    return _handshake(META_PROVIDERS["messenger"])


@bp.post("/messenger")
def messenger_delivery() -> ResponseReturnValue:
    # One endpoint for both: the envelope's `object` says whose delivery it is.
    by_object = {"page": get_provider("messenger"), "instagram": get_provider("instagram")}
    return receive(by_object["page"], by_object=by_object)


def _handshake(providers: tuple[str, ...]) -> ResponseReturnValue:
    """Meta's subscription check: echo the challenge only for a known verify token."""
    mode = request.args.get("hub.mode")
    token = request.args.get("hub.verify_token", "")
    challenge = request.args.get("hub.challenge", "")
    if mode != "subscribe" or not token:
        return Response("not a subscription request", status=403, mimetype="text/plain")
    with get_db().transaction() as session:
        known = identities_with_verify_token(session, providers, token)
    if not known:
        return Response("unknown verify token", status=403, mimetype="text/plain")
    return Response(challenge, status=200, mimetype="text/plain")


def receive(
    provider: Provider, by_object: Mapping[str, Provider] | None = None
) -> ResponseReturnValue:
    """`by_object`: the endpoint serves several providers, told apart by `object`."""
    config: Config = current_app.config["RATCHET"]
    raw = read_body(config.max_webhook_body)
    try:
        payload = parse_json(raw)
        if not isinstance(payload, dict):
            raise WebhookFormatError("the body is not a JSON object")
        if by_object is not None:
            provider = _provider_by_object(by_object, payload)
        routing_ids = provider.routing_ids(payload)
    except (BodyError, WebhookFormatError) as exc:
        return json_error(400, f"not a {provider.name} webhook: {exc}")
    if not routing_ids and provider.name == "whatsapp" and business_account_ids(payload):
        # Account, template and quality events: they name the business account alone.
        return receive_account_delivery(provider, raw, kept_headers(request.headers), payload)
    if not routing_ids:
        return json_error(400, f"the delivery names no {provider.name} identity")
    if len(routing_ids) > MAX_ROUTING_IDS:
        return json_error(
            400,
            f"the delivery names {len(routing_ids)} {provider.name} identities; "
            f"a real one names at most {MAX_ROUTING_IDS}",
        )

    try:
        batch: WebhookBatch | None = provider.parse_webhook(payload)
        not_understood = None
    except WebhookFormatError as exc:
        batch, not_understood = None, exc

    # Every unit of work of the request (the lookup, the raw delivery with its statuses,
    # then each status) on one pooled connection.
    db = request_db()
    arrived = Arrival(provider, raw, kept_headers(request.headers), routing_ids, batch)
    stored: Stored | NotVerified | ResponseReturnValue | None = None
    remembered = None
    by_route: dict[str, RoutedIdentity] = {}
    if db.postgresql and arrived.one_plain_status():
        # One status of one number, WhatsApp's usual delivery: verified with the identity
        # this process remembers, and recorded only if it still has that secret.
        remembered = remembered_routing().get(provider.name, routing_ids[0])
        if remembered is not None:
            by_route = {routing_ids[0]: remembered}
            stored = _store(db, arrived, by_route, remembered=True)
    # Looked up: nothing remembered, or what was remembered did not do. Twice at most: the
    # record also checks the secret it was verified with, and a secret set again between
    # a lookup and the record makes that lookup's verdict void.
    for _ in range(2):
        if stored is not None and not isinstance(stored, NotVerified):
            break
        with db.autocommit() as connection:  # one read
            by_route = routed_identities(connection, provider.name, routing_ids)
        remembered_routing().keep(provider.name, by_route)
        if isinstance(stored, NotVerified) and list(by_route.values()) == [remembered]:
            # The same sealed secret that just failed to verify it: no second check.
            stored = _refused(provider, known=True)
        else:
            stored = _store(db, arrived, by_route, remembered=False)
    if stored is None or isinstance(stored, NotVerified):
        return _refused(provider, known=True)
    if not isinstance(stored, Stored):
        return stored
    if provider.name == "whatsapp":
        # A number's business account, learned from the first delivery naming both.
        for routing_id in learn_business_accounts_of(db, payload, by_route):
            remembered_routing().forget(provider.name, routing_id)
        keep_account_changes_beside(
            db, provider, raw, arrived.headers, stored.recorded.delivery_id, payload
        )
    recorded, unstorable, now = stored.recorded, stored.unstorable, stored.now
    delivery_id = recorded.delivery_id
    if batch is None:
        # Signed by the provider but not a shape we know: kept verbatim for a person to
        # read, and acknowledged, since a non-2xx would only make it come back.
        log.error(
            "%s delivery %s kept but not understood: %s", provider.name, delivery_id, not_understood
        )
        return jsonify(
            received=0, stored=delivery_id, error=f"not understood: {not_understood}"
        ), 202
    if unstorable:
        log.error(
            "%s delivery %s: %d statuses with values no real one has (kept in the raw body)",
            provider.name,
            delivery_id,
            unstorable,
        )
    for reported in batch.errors:
        log.warning("%s reported an error: %s", provider.name, reported.error.to_dict())

    counts = apply_recorded(db, recorded, now)
    if unstorable:
        counts["unstorable"] = unstorable
    for result, n in counts.items():
        if n:
            instruments.WEBHOOK_STATUSES.labels(provider.name, result).inc(n)
    return jsonify(received=len(batch.statuses), inbound=len(batch.inbound), results=counts)


class NotVerified:
    """`_store` with remembered identities: the signature does not verify with them."""


NOT_VERIFIED = NotVerified()


def remembered_routing() -> RememberedRouting:
    """The identities this app last read for each routing id (see `RememberedRouting`)."""
    memory: RememberedRouting = current_app.extensions.setdefault(
        "ratchet.routing", RememberedRouting()
    )
    return memory


@dataclass(frozen=True, slots=True)
class Arrival:
    """A delivery as it came: parsed, not yet verified."""

    provider: Provider
    raw: bytes
    headers: dict[str, str]
    routing_ids: list[str]
    batch: WebhookBatch | None

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


def _provider_by_object(by_object: Mapping[str, Provider], payload: dict[str, Any]) -> Provider:
    provider = by_object.get(str(payload.get("object")))
    if provider is None:
        known = " or ".join(repr(name) for name in by_object)
        raise WebhookFormatError(f"'object' is {payload.get('object')!r}, not {known}")
    return provider
