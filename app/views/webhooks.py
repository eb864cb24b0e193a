"""Webhook endpoints, for the providers. Every correctly signed delivery gets a 2xx, even
with unknown ids and duplicates: a non-2xx makes Meta redeliver the whole batch.

For each delivery:
1. Over 1 MiB: 413, before the body is read whole.
2. The identities come from the routing ids alone; the signature is checked over the raw
   bytes with their secret, and every identity named must share it. Otherwise 401.
3. The raw delivery and its statuses are committed first (duplicates dropped by key), and
   inbound messages open their 24-hour windows. A signed delivery we cannot parse is kept
   verbatim and acknowledged (202), so nothing is lost and Meta does not resend it forever.
4. Each status is then applied in its own transaction; one that fails stays unapplied and
   the sweeper replays it.
"""

from __future__ import annotations

import hmac
import json
import logging

from flask import Blueprint, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from app.clock import utcnow
from app.config import Config
from app.crypto import get_box
from app.db import get_db
from app.models import Identity
from app.providers import get_provider
from app.providers.base import Provider, WebhookBatch, WebhookFormatError
from app.repo.identities import find_identity, identities_with_verify_token, reveal_secrets
from app.repo.inbox import IncomingStatus, store_delivery, store_statuses
from app.repo.webhooks import apply_webhook_status
from app.repo.windows import open_window
from app.views.errors import json_error

log = logging.getLogger(__name__)

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")

# Meta's apps: one app secret, one verify token per identity of these providers.
META_PROVIDERS = {"whatsapp": ("whatsapp",), "messenger": ("messenger", "instagram")}


@bp.get("/whatsapp")
def whatsapp_handshake() -> ResponseReturnValue:
    return _handshake(META_PROVIDERS["whatsapp"])


@bp.post("/whatsapp")
def whatsapp_delivery() -> ResponseReturnValue:
    return receive(get_provider("whatsapp"))


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


def receive(provider: Provider) -> ResponseReturnValue:
    config: Config = current_app.config["RATCHET"]
    request.max_content_length = config.max_webhook_body
    raw = request.get_data(cache=True)
    try:
        payload = json.loads(raw)
        if not isinstance(payload, dict):
            raise WebhookFormatError("the body is not a JSON object")
        routing_ids = provider.routing_ids(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, WebhookFormatError) as exc:
        return json_error(400, f"not a {provider.name} webhook: {exc}")
    if not routing_ids:
        return json_error(400, f"the delivery names no {provider.name} identity")

    db = get_db()
    with db.transaction() as session:
        identities = {rid: find_identity(session, provider.name, rid) for rid in routing_ids}
        unknown = [rid for rid, identity in identities.items() if identity is None]
        if unknown:
            log.warning("%s webhook for unknown identities %s: refused", provider.name, unknown)
            return json_error(401, "the delivery names an identity this service does not have")
        known = [identity for identity in identities.values() if identity is not None]
        if not _verified(provider, raw, known):
            return json_error(401, "the signature does not match")
        now = utcnow()
        delivery_id = store_delivery(
            session, provider.name, known[0].id, dict(request.headers), raw.decode("utf-8"), now
        )
        try:
            batch = provider.parse_webhook(payload)
        except WebhookFormatError as exc:
            # Signed by the provider but not a shape we know: kept verbatim for a person to
            # read, and acknowledged, since a non-2xx would only make it come back.
            log.error("%s delivery %s kept but not understood: %s", provider.name, delivery_id, exc)
            return jsonify(received=0, stored=delivery_id, error=f"not understood: {exc}"), 202
        by_route = {rid: identity.id for rid, identity in identities.items() if identity}
        status_ids, duplicates = store_statuses(
            session, delivery_id, _incoming(provider, batch, by_route), now
        )
        for inbound in batch.inbound:
            open_window(
                session, by_route[inbound.routing_id], inbound.sender, inbound.provider_time
            )
        for reported in batch.errors:
            log.warning("%s reported an error: %s", provider.name, reported.error.to_dict())

    counts: dict[str, int] = {"duplicate": duplicates}
    for status_id in status_ids:
        result = _apply_one(status_id)
        counts[result] = counts.get(result, 0) + 1
    return jsonify(received=len(batch.statuses), inbound=len(batch.inbound), results=counts)


def _verified(provider: Provider, raw: bytes, identities: list[Identity]) -> bool:
    box = get_box()
    secrets = [reveal_secrets(box, identity).app_secret or "" for identity in identities]
    first = secrets[0]
    if not first or not provider.verify_signature(raw, dict(request.headers), first):
        return False
    # Every identity the delivery names must share the secret that verified it.
    return all(hmac.compare_digest(first, other) for other in secrets[1:])


def _incoming(
    provider: Provider, batch: WebhookBatch, by_route: dict[str, int]
) -> list[IncomingStatus]:
    statuses = []
    for update in batch.statuses:
        errors = tuple(error.to_dict() for error in update.errors)
        failure_class = None
        if update.errors:
            failure_class = provider.classify(
                update.errors[0].http_status, update.errors[0].code
            ).value
        statuses.append(
            IncomingStatus(
                identity_id=by_route[update.routing_id],
                provider=provider.name,
                provider_message_id=update.provider_message_id,
                status=update.status,
                provider_time=update.provider_time,
                correlation_id=update.correlation_id,
                errors=errors,
                failure_class=failure_class,
                raw=update.raw,
            )
        )
    return statuses


def _apply_one(status_id: int) -> str:
    """Apply one status in its own transaction; a failure leaves it for the sweeper."""
    try:
        with get_db().transaction() as session:
            return apply_webhook_status(session, status_id, utcnow())
    except Exception:
        log.exception("status %s could not be applied now; the sweeper will replay it", status_id)
        return "unapplied"
