"""`POST /webhooks/twilio/<identity_id>`: Twilio's status callbacks (and incoming WhatsApp
messages, when the sender's incoming-message URL points here) for one Twilio identity.

For each request:
1. Over 1 MiB: 413 (`app/views/body.py`); not form data: 400, before any lookup.
2. The identity comes from the path; `X-Twilio-Signature` is checked over the exact public
   URL Twilio requested (`PUBLIC_BASE_URL` + path + query string, as we gave it in
   `StatusCallback`) and the sorted form parameters, with that identity's Auth Token, in
   constant time (`app/providers/twilio.py`). The callback must also name the identity's
   Account SID. Otherwise 401, one answer for an unknown identity, a bad signature and
   another account, so the endpoint does not tell which identities exist.
3. The raw request is committed with its status (deduplicated by key) or, for an incoming
   message, the recipient's 24-hour window: the reconciler's `record_delivery`
   (`app/reconcile.py`), as for WhatsApp. A signed request we cannot read is kept verbatim
   and acknowledged (202).
4. The status is applied by the same reconciler (`apply_recorded`), in its own
   transaction; one that fails stays unapplied and the sweeper replays it.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from app import instruments
from app.clock import utcnow
from app.config import Config
from app.crypto import get_box
from app.db import request_db
from app.json_errors import json_error
from app.models import Identity
from app.providers import twilio
from app.providers.base import StatusUpdate, WebhookFormatError
from app.reconcile import (
    InboundMessage,
    StatusesRefusedError,
    apply_recorded,
    keep_raw_delivery,
    record_delivery,
)
from app.repo.identities import get_identity, reveal_secrets
from app.repo.inbox import IncomingStatus
from app.views.body import BodyError, kept_headers, read_body
from app.views.webhooks import count_delivery

log = logging.getLogger(__name__)

bp = Blueprint("twilio_webhooks", __name__, url_prefix="/webhooks")

# The one answer for "no such identity", "the signature does not match" and "another account".
UNVERIFIED = "the request is not signed by the Twilio identity it is addressed to"
# Column widths of webhook_statuses and conversation_windows (see app/views/webhooks.py).
LIMITS = {"provider_message_id": 200, "status": 20, "correlation_id": 512}
WINDOW_RECIPIENT = 100


@bp.after_request
def _count(response: Response) -> Response:
    return count_delivery(response)


@bp.post("/twilio/<int:identity_id>")
def twilio_callback(identity_id: int) -> ResponseReturnValue:
    config: Config = current_app.config["RATCHET"]
    try:
        raw = read_body(config.max_webhook_body)
        params = twilio.parse_form(raw)
    except (BodyError, WebhookFormatError) as exc:
        return json_error(400, f"not a Twilio callback: {exc}")
    fields = dict(params)
    url = signed_url(config.public_base_url)
    signature = request.headers.get(twilio.SIGNATURE_HEADER)
    now = utcnow()

    # What the request says, read before it is stored: an incoming message (its window),
    # a status, or a signed shape we do not know (kept verbatim all the same).
    statuses: list[IncomingStatus] = []
    inbound: list[InboundMessage] = []
    answer: tuple[dict[str, Any], int] | None = None
    if _is_inbound(fields):
        sender = (fields.get("WaId") or fields.get("From", "")).removeprefix("whatsapp:")
        sender = sender.lstrip("+")
        if sender and len(sender) <= WINDOW_RECIPIENT and "\x00" not in sender:
            inbound.append(InboundMessage(identity_id, sender, now))
            answer = {"received": 0, "inbound": 1}, 200
        else:
            answer = {"received": 0, "inbound": 0}, 202
    else:
        try:
            update = twilio.parse_callback(fields, now, request.args.get(twilio.CORRELATION_PARAM))
        except WebhookFormatError as exc:
            # Signed by Twilio but not a shape we know: kept verbatim and acknowledged,
            # since a non-2xx would only make it come back.
            answer = {"received": 0, "error": f"not understood: {exc}"}, 202
        else:
            incoming = _incoming(identity_id, update)
            if all(_fits(getattr(incoming, name), width) for name, width in LIMITS.items()):
                statuses.append(incoming)
            else:
                answer = {"received": 1, "results": {"unstorable": 1}}, 202

    # Both transactions (the raw request, then its status) on one pooled connection.
    db = request_db()
    headers = kept_headers(request.headers)
    body = raw.decode("utf-8")
    try:
        with db.transaction() as session:
            identity = get_identity(session, identity_id) if identity_id < 2**63 else None
            verified = (
                identity is not None
                and identity.provider == twilio.NAME
                and twilio.verify_request(url, params, signature, _auth_token(identity))
                and fields.get("AccountSid") == identity.account_id
            )
            if identity is None or not verified:
                log.warning("twilio callback to identity %s refused: not verified", identity_id)
                return json_error(401, UNVERIFIED)
            # The raw request commits with its status or window, before anything applies.
            recorded = record_delivery(
                session,
                provider=twilio.NAME,
                identity_id=identity_id,
                headers=headers,
                body=body,
                now=now,
                statuses=statuses,
                inbound=inbound,
            )
    except StatusesRefusedError as refused:
        kept = keep_raw_delivery(db, refused)
        return jsonify(received=0, stored=kept, error="status not stored"), 202
    if answer is not None:
        if answer[1] != 200:
            log.error("twilio delivery %s kept, not applied: %s", recorded.delivery_id, answer[0])
            answer[0]["stored"] = recorded.delivery_id
        return jsonify(answer[0]), answer[1]
    counts = apply_recorded(db, recorded, now)
    for result, n in counts.items():
        if n:
            instruments.WEBHOOK_STATUSES.labels(twilio.NAME, result).inc(n)
    return jsonify(received=1, inbound=0, results=counts)


def _auth_token(identity: Identity) -> str:
    """The identity's Auth Token; empty (nothing verifies) if this SECRET_KEY cannot read it."""
    try:
        return reveal_secrets(get_box(), identity).token
    except ValueError:
        log.error(
            "identity %s: its Auth Token cannot be decrypted with this SECRET_KEY", identity.id
        )
        return ""


def signed_url(public_base_url: str) -> str:
    """The URL Twilio requested, as it signed it: our public address (behind any proxy),
    the path, and the query string exactly as received."""
    query = request.query_string.decode("latin-1")
    return public_base_url.rstrip("/") + request.path + (f"?{query}" if query else "")


def _is_inbound(fields: dict[str, str]) -> bool:
    """An incoming message: Twilio's incoming-message webhook has a `Body` and no
    `MessageStatus` (its `SmsStatus` is `received`)."""
    if fields.get("MessageStatus"):
        return False
    return fields.get("SmsStatus") == "received" or "Body" in fields


def _incoming(identity_id: int, update: StatusUpdate) -> IncomingStatus:
    errors = tuple(error.to_dict() for error in update.errors)
    failure_class = None
    if update.errors:
        failure_class = twilio.TwilioProvider().classify(None, update.errors[0].code).value
    return IncomingStatus(
        identity_id=identity_id,
        routing_id=update.routing_id,
        provider=twilio.NAME,
        provider_message_id=update.provider_message_id,
        status=update.status,
        provider_time=update.provider_time,
        correlation_id=update.correlation_id,
        errors=errors,
        failure_class=failure_class,
        raw=update.raw,
    )


def _fits(value: str | None, width: int) -> bool:
    return value is None or (len(value) <= width and "\x00" not in value)
