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
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from app import instruments
from app.config import Config
from app.db import Database, get_db, request_db
from app.json_errors import json_error
from app.providers import get_provider
from app.providers.base import Provider, WebhookBatch, WebhookFormatError
from app.providers.whatsapp_account import business_account_ids
from app.reconcile import apply_recorded
from app.repo.identities import identities_with_verify_token
from app.repo.routing import RoutedIdentity
from app.views.account_webhooks import (
    keep_account_changes_beside,
    learn_business_accounts_of,
    receive_account_delivery,
)
from app.views.body import BodyError, kept_headers, parse_json, read_body
from app.views.webhook_record import Arrival, Stored, remembered_routing, verify_and_record

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
    """`by_object`: the endpoint serves several providers, told apart by `object`.

    1. Read and parse the delivery: refused (400) before any lookup, or handed to the
       account events' view.
    2. Verify it and record it (`verify_and_record`): with the identity this process
       remembers where it can (the fast path), else with the identities looked up.
    3. Learn a WhatsApp number's business account from it.
    4. Apply its statuses, each in its own transaction, and answer with the counts.
    """
    config: Config = current_app.config["RATCHET"]
    arrived = _arrival(provider, by_object, read_body(config.max_webhook_body))
    if not isinstance(arrived, Arrival):
        return arrived
    # Every unit of work of the request (the lookup, the raw delivery with its statuses,
    # then each status) on one pooled connection.
    db = request_db()
    stored, by_route = verify_and_record(db, arrived)
    if not isinstance(stored, Stored):
        return stored
    if arrived.provider.name == "whatsapp":
        _learn_business_accounts(db, arrived, by_route, stored)
    return _apply_and_answer(db, arrived, stored)


def _arrival(
    provider: Provider, by_object: Mapping[str, Provider] | None, raw: bytes
) -> Arrival | ResponseReturnValue:
    """The delivery parsed, not yet verified; or the answer to it, before any lookup (400,
    or the account events' view for a delivery naming a business account alone)."""
    try:
        payload = parse_json(raw)
        if not isinstance(payload, dict):
            raise WebhookFormatError("the body is not a JSON object")
        if by_object is not None:
            provider = _provider_by_object(by_object, payload)
        routing_ids = provider.routing_ids(payload)
    except (BodyError, WebhookFormatError) as exc:
        article = "an" if provider.name[0] in "aeiou" else "a"  # an instagram webhook
        return json_error(400, f"not {article} {provider.name} webhook: {exc}")
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
    headers = kept_headers(request.headers)
    return Arrival(provider, raw, headers, routing_ids, batch, payload, not_understood)


def _learn_business_accounts(
    db: Database, arrived: Arrival, by_route: dict[str, RoutedIdentity], stored: Stored
) -> None:
    """A number's business account, learned from the first delivery naming both."""
    provider, payload = arrived.provider, arrived.payload
    for routing_id in learn_business_accounts_of(db, payload, by_route):
        remembered_routing().forget(provider.name, routing_id)
    keep_account_changes_beside(
        db, provider, arrived.raw, arrived.headers, stored.recorded.delivery_id, payload
    )


def _apply_and_answer(db: Database, arrived: Arrival, stored: Stored) -> ResponseReturnValue:
    """Apply each recorded status in its own transaction; answer with the counts."""
    provider, batch = arrived.provider, arrived.batch
    recorded, unstorable, now = stored.recorded, stored.unstorable, stored.now
    delivery_id = recorded.delivery_id
    if batch is None:
        # Signed by the provider but not a shape we know: kept verbatim for a person to
        # read, and acknowledged, since a non-2xx would only make it come back.
        not_understood = arrived.not_understood
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


def _provider_by_object(by_object: Mapping[str, Provider], payload: dict[str, Any]) -> Provider:
    provider = by_object.get(str(payload.get("object")))
    if provider is None:
        known = " or ".join(repr(name) for name in by_object)
        raise WebhookFormatError(f"'object' is {payload.get('object')!r}, not {known}")
    return provider
