"""The send API, for the tenants' own systems: `POST /v1/messages`, `GET /v1/messages/<id>`."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request
from flask.typing import ResponseReturnValue

from app.clock import utcnow
from app.config import Config
from app.db import get_db
from app.json_errors import json_error
from app.lifecycle import TIMESTAMP_FIELD
from app.models import Message
from app.providers import PROVIDERS
from app.repo.callback_endpoints import set_message_callback, status_callback_endpoint
from app.repo.cancels import cancel_message
from app.repo.identities import get_identity
from app.repo.identity_validity import lane_default
from app.repo.listing import get_tenant_message
from app.repo.messages import NewMessage, create_message, mark_unrung
from app.repo.template_holds import note_if_held
from app.repo.windows import is_window_open
from app.schedule import schedule, with_default_validity
from app.sendrequest import (
    MAX_ID,
    RequestError,
    fingerprint,
    normalise_recipient,
    page_refusal,
    parse_send_request,
)
from app.views.body import BodyError, parse_json, read_body
from app.views.intake import note_accepted, refuse_past_limits
from app.views.keycache import tenant_for_key
from app.views.openapi_tenant import document as openapi_document
from jobs.ringing import ring_message

log = logging.getLogger(__name__)

bp = Blueprint("api", __name__, url_prefix="/v1")


@bp.before_request
def require_api_key() -> Response | None:
    if request.endpoint == "api.openapi":
        return None
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key:
        return json_error(401, "send your API key as `Authorization: Bearer <key>`")
    tenant = tenant_for_key(key.strip())
    if tenant is None:
        return json_error(401, "that API key is not valid")
    g.tenant_id = tenant.id
    g.tenant_name = tenant.name
    return refuse_past_limits(tenant)


@bp.after_request
def count_accepted(response: Response) -> Response:
    if "tenant_id" in g:
        note_accepted(response, g.tenant_id)
    return response


def message_json(message: Message) -> dict[str, Any]:
    timestamps = {
        status.value: _iso(getattr(message, column))
        for status, column in TIMESTAMP_FIELD.items()
        if getattr(message, column) is not None
    }
    return {
        "id": message.id,
        "status": message.status,
        "lane": message.lane,
        "identity_id": message.identity_id,
        "to": message.recipient,
        "tag": message.tag,
        "idempotency_key": message.idempotency_key,
        "campaign": message.campaign,
        "provider_message_id": message.provider_message_id,
        "attempts": message.attempt,
        "cycle": message.cycle,
        "last_error": message.last_error,
        "failure_class": message.failure_class,
        "timestamps": timestamps,
        "created_at": _iso(message.created_at),
        "content_purged_at": _iso(message.content_purged_at),
        "send_at": _iso(message.not_before),
        "expires_at": _iso(message.expires_at),
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def read_json() -> Any:
    config: Config = current_app.config["RATCHET"]
    if request.mimetype != "application/json":
        raise RequestError("send the body as JSON with `Content-Type: application/json`")
    raw = read_body(config.max_api_body)  # 413 over the limit, chunked or not
    try:
        return parse_json(raw)
    except BodyError as exc:
        raise RequestError(f"the body is not valid JSON: {exc}") from exc


@bp.post("/messages")
def create() -> ResponseReturnValue:
    try:
        payload = read_json()
    except RequestError as exc:
        status = 415 if "Content-Type" in str(exc) else 400
        return json_error(status, str(exc))
    try:
        send = parse_send_request(payload, request.headers.get("Idempotency-Key"))
    except RequestError as exc:
        return json_error(400, str(exc), field=exc.field)

    now = utcnow()
    try:
        when = schedule(send, now)
    except RequestError as exc:
        return json_error(400, str(exc), field=exc.field)
    db = get_db()
    with db.transaction() as session:
        # An id past the database's range names no row (and cannot be sent as a bigint).
        identity = get_identity(session, send.identity_id) if send.identity_id <= MAX_ID else None
        if identity is None or identity.tenant_id != g.tenant_id:
            return json_error(
                422,
                f"identity_id {send.identity_id} is not one of your identities",
                field="identity_id",
            )
        if identity.provider not in PROVIDERS:
            # Accepting it would promise a send that can never happen: it would wait for ever.
            return json_error(
                422,
                f"identity {identity.id} sends through {identity.provider}, which Ratchet "
                "cannot send through yet; nothing was stored",
                field="identity_id",
            )
        refusal = page_refusal(identity.provider, send)
        if refusal is not None:
            return json_error(422, refusal[1], field=refusal[0])
        try:
            recipient = normalise_recipient(identity.provider, send.to)
        except RequestError as exc:
            return json_error(400, str(exc), field=exc.field)
        callback: int | None = None
        if send.status_callback is not None:
            allowed = current_app.config["RATCHET"].callback_allow_hosts
            found = status_callback_endpoint(session, g.tenant_id, send.status_callback, allowed)
            if isinstance(found, str):
                return json_error(422, found, field="status_callback")
            callback = found
        lane = send.lane or _default_lane(session, identity.id, recipient, send.text, now)
        # Only now is the lane known, and with it the identity's default validity for it.
        when = with_default_validity(when, send, lane_default(identity, lane), now)
        request_fingerprint = fingerprint(send, recipient)
        message, created = create_message(
            session,
            NewMessage(
                tenant_id=g.tenant_id,
                identity_id=identity.id,
                recipient=recipient,
                lane=lane,
                fingerprint=request_fingerprint,
                body_text=send.text,
                template=send.template.model_dump() if send.template else None,
                idempotency_key=send.idempotency_key,
                tag=send.tag,
                campaign=send.campaign,
                not_before=when.not_before,
                expires_at=when.expires_at,
            ),
            now,
        )
        if created and callback is not None:
            set_message_callback(session, message.id, callback, str(send.status_callback))
        if created and message.template:
            note_if_held(session, message, now)  # its timeline says why it waits
    if not created:
        if message.fingerprint != request_fingerprint:
            return json_error(
                422,
                "this idempotency key was already used for a different request",
                existing_id=message.id,
            )
        return jsonify(message_json(message)), 200

    # Committed first, rung after: if Redis is down the sweeper rings it later.
    if not ring_message(message.id, message.lane, message.identity_id):
        with db.transaction() as session:
            mark_unrung(session, message.id)
    response = jsonify(message_json(message))
    response.headers["Location"] = f"/v1/messages/{message.id}"
    return response, 201


def _default_lane(
    session: Any, identity_id: int, recipient: str, text: str | None, now: datetime
) -> str:
    """`reply` only for free-form text inside an open 24-hour window; else `campaign`."""
    if text is not None and is_window_open(session, identity_id, recipient, now):
        return "reply"
    return "campaign"


@bp.get("/messages/<int:message_id>")
def show(message_id: int) -> ResponseReturnValue:
    message = None
    if message_id <= MAX_ID:  # a larger id names no row (and cannot be sent as a bigint)
        with get_db().transaction() as session:
            message = get_tenant_message(session, g.tenant_id, message_id)
    if message is None:
        return json_error(404, f"message {message_id} not found")
    return jsonify(message_json(message))


@bp.post("/messages/<int:message_id>/cancel")
def cancel(message_id: int) -> ResponseReturnValue:
    """Cancel a message no worker has claimed yet: 200 canceled, 409 with its state when
    too late (claimed, sent, failed). An optional JSON body gives the `reason`."""
    reason = "canceled through the API"
    if request.content_length or request.headers.get("Transfer-Encoding"):
        try:
            payload = read_json()
        except RequestError as exc:
            return json_error(400, str(exc))
        if not isinstance(payload, dict) or set(payload) - {"reason"}:
            return json_error(400, "the body may only be an object with a `reason`")
        given = payload.get("reason")
        if given is not None:
            if not isinstance(given, str) or not given.strip() or len(given) > 500:
                return json_error(400, "`reason` must be a non-empty string of 500 or fewer")
            if "\x00" in given:
                return json_error(400, "`reason` must not contain a NUL character")
            reason = given.strip()
    if message_id > MAX_ID:
        return json_error(404, f"message {message_id} not found")
    with get_db().transaction() as session:
        if get_tenant_message(session, g.tenant_id, message_id) is None:
            return json_error(404, f"message {message_id} not found")
        outcome = cancel_message(
            session,
            message_id,
            utcnow(),
            actor=f"api:{g.tenant_name}",
            reason=reason,
            tenant_id=g.tenant_id,
            via="api",
        )
        message = get_tenant_message(session, g.tenant_id, message_id)
    assert message is not None
    if not outcome.canceled:
        body = {
            "error": f"too late to cancel: {outcome.why_not}",
            "status": message.status,
            "message": message_json(message),
        }
        return jsonify(body), 409
    return jsonify(message_json(message))


@bp.get("/openapi.json")
def openapi() -> ResponseReturnValue:
    return jsonify(openapi_document())
