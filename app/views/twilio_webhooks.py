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
3. The raw request is committed first, then its status (deduplicated by key) or, for an
   incoming message, the recipient's 24-hour window.
4. The status is handed to the same reconciler the WhatsApp webhook uses
   (`apply_webhook_status`), in its own transaction; one that fails stays unapplied and
   the sweeper replays it.
"""

from __future__ import annotations

import logging

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from app.clock import utcnow
from app.config import Config
from app.crypto import get_box
from app.db import get_db
from app.models import Identity
from app.providers import twilio
from app.providers.base import StatusUpdate, WebhookFormatError
from app.repo.identities import get_identity, reveal_secrets
from app.repo.inbox import IncomingStatus, store_delivery, store_statuses
from app.repo.webhooks import apply_webhook_status
from app.repo.windows import open_window
from app.views.body import BodyError, read_body
from app.views.errors import json_error

log = logging.getLogger(__name__)

bp = Blueprint("twilio_webhooks", __name__, url_prefix="/webhooks")

# The one answer for "no such identity", "the signature does not match" and "another account".
UNVERIFIED = "the request is not signed by the Twilio identity it is addressed to"
# Column widths of webhook_statuses and conversation_windows (see app/views/webhooks.py).
LIMITS = {"provider_message_id": 200, "status": 20, "correlation_id": 512}
WINDOW_RECIPIENT = 100


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

    db = get_db()
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
        now = utcnow()
        # The raw request commits on its own first: whatever follows, it is kept.
        delivery_id = store_delivery(
            session, twilio.NAME, identity.id, dict(request.headers), raw.decode("utf-8"), now
        )

    if _is_inbound(fields):
        sender = (fields.get("WaId") or fields.get("From", "")).removeprefix("whatsapp:")
        sender = sender.lstrip("+")
        if not sender or len(sender) > WINDOW_RECIPIENT or "\x00" in sender:
            return jsonify(received=0, inbound=0, stored=delivery_id), 202
        with db.transaction() as session:
            open_window(session, identity_id, sender, now)
        return jsonify(received=0, inbound=1)

    try:
        update = twilio.parse_callback(fields, now, request.args.get(twilio.CORRELATION_PARAM))
    except WebhookFormatError as exc:
        # Signed by Twilio but not a shape we know: kept verbatim and acknowledged, since a
        # non-2xx would only make it come back.
        log.error("twilio delivery %s kept but not understood: %s", delivery_id, exc)
        return jsonify(received=0, stored=delivery_id, error=f"not understood: {exc}"), 202
    incoming = _incoming(identity_id, update)
    if not all(_fits(getattr(incoming, name), width) for name, width in LIMITS.items()):
        log.error("twilio delivery %s: values no real status has (kept raw)", delivery_id)
        return jsonify(received=1, stored=delivery_id, results={"unstorable": 1}), 202
    with db.transaction() as session:
        status_ids, duplicates = store_statuses(session, delivery_id, [incoming], now)
    counts: dict[str, int] = {"duplicate": duplicates}
    for status_id in status_ids:
        result = _apply_one(status_id)
        counts[result] = counts.get(result, 0) + 1
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


def _apply_one(status_id: int) -> str:
    """Apply one status in its own transaction; a failure leaves it for the sweeper."""
    try:
        with get_db().transaction() as session:
            return apply_webhook_status(session, status_id, utcnow())
    except Exception:
        log.exception("status %s could not be applied now; the sweeper will replay it", status_id)
        return "unapplied"
