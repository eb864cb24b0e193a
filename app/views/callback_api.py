"""`/v1/callback-endpoints`: a tenant's status callback receivers (docs/callbacks.md).

The signing secret (`whsec_...`) is in the answer of the create and of a roll, and never
again. URLs are checked against SSRF (`app/callback_urls.py`) before anything is stored.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from flask import Blueprint, current_app, g, jsonify, request
from flask.typing import ResponseReturnValue

from app.callback_models import CallbackEndpoint
from app.callback_urls import CallbackUrlError, validate_callback_url
from app.clock import utcnow
from app.config import Config
from app.crypto import get_box
from app.db import get_db
from app.json_errors import json_error
from app.repo import callback_endpoints as repo
from app.sendrequest import MAX_ID, RequestError
from app.views.api import read_json, require_api_key

bp = Blueprint("callback_api", __name__, url_prefix="/v1/callback-endpoints")
bp.before_request(require_api_key)

# How long a rolled secret keeps signing beside the new one, by default and at most.
DEFAULT_OVERLAP, MAX_OVERLAP = 86400, 7 * 86400
FIELDS = {"url", "events", "enabled"}


def endpoint_json(endpoint: CallbackEndpoint, secret: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": endpoint.id,
        "url": endpoint.url,
        "events": endpoint.events,
        "enabled": endpoint.enabled,
        "disabled_reason": endpoint.disabled_reason,
        "disabled_at": _iso(endpoint.disabled_at),
        "previous_secret_until": _iso(endpoint.previous_secret_until),
        "created_at": _iso(endpoint.created_at),
        "updated_at": _iso(endpoint.updated_at),
    }
    if secret is not None:
        body["secret"] = secret
    return body


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def _body(required: set[str]) -> dict[str, Any]:
    payload = read_json()
    if not isinstance(payload, dict):
        raise RequestError("the body must be a JSON object")
    unknown = set(payload) - FIELDS
    if unknown:
        raise RequestError(f"{sorted(unknown)[0]}: is not a field of this request")
    missing = required - set(payload)
    if missing:
        raise RequestError(f"{sorted(missing)[0]}: is required")
    if "enabled" in payload and not isinstance(payload["enabled"], bool):
        raise RequestError("enabled: must be true or false")
    if "events" in payload:
        # Checked here too: a change would take `null` for "leave them as they are".
        repo.check_events(payload["events"])
    return payload


def _url(raw: object) -> tuple[str, str]:
    config: Config = current_app.config["RATCHET"]
    try:
        target = validate_callback_url(raw, config.callback_allow_hosts)
    except CallbackUrlError as exc:
        raise RequestError(f"url: {exc}") from exc
    return target.url, target.host


@bp.post("")
def create() -> ResponseReturnValue:
    try:
        payload = _body({"url"})
        url, host = _url(payload["url"])
        with get_db().transaction() as session:
            endpoint, secret = repo.create_endpoint(
                session,
                get_box(),
                tenant_id=g.tenant_id,
                url=url,
                host=host,
                events=payload.get("events", list(repo.EVENTS)),
                enabled=payload.get("enabled", True),
                now=utcnow(),
            )
            body = endpoint_json(endpoint, secret)
    except (RequestError, repo.EndpointError) as exc:
        return json_error(400, str(exc))
    response = jsonify(body)
    response.headers["Location"] = f"/v1/callback-endpoints/{body['id']}"
    return response, 201


@bp.get("")
def index() -> ResponseReturnValue:
    with get_db().transaction() as session:
        found = [endpoint_json(e) for e in repo.list_endpoints(session, g.tenant_id)]
    return jsonify({"endpoints": found})


def _missing(endpoint_id: int) -> ResponseReturnValue:
    return json_error(404, f"callback endpoint {endpoint_id} not found")


@bp.get("/<int:endpoint_id>")
def show(endpoint_id: int) -> ResponseReturnValue:
    with get_db().transaction() as session:
        endpoint = repo.get_endpoint(session, g.tenant_id, min(endpoint_id, MAX_ID))
        body = endpoint_json(endpoint) if endpoint is not None else None
    return jsonify(body) if body is not None else _missing(endpoint_id)


@bp.patch("/<int:endpoint_id>")
def change(endpoint_id: int) -> ResponseReturnValue:
    try:
        payload = _body(set())
        url, host = _url(payload["url"]) if "url" in payload else (None, None)
        with get_db().transaction() as session:
            endpoint = repo.get_endpoint(session, g.tenant_id, min(endpoint_id, MAX_ID))
            if endpoint is None:
                return _missing(endpoint_id)
            repo.update_endpoint(
                session,
                endpoint,
                utcnow(),
                url=url,
                host=host,
                events=payload.get("events"),
                enabled=payload.get("enabled"),
                by=f"api:{g.tenant_name}",
            )
            body = endpoint_json(endpoint)
    except (RequestError, repo.EndpointError) as exc:
        return json_error(400, str(exc))
    return jsonify(body)


@bp.delete("/<int:endpoint_id>")
def delete(endpoint_id: int) -> ResponseReturnValue:
    with get_db().transaction() as session:
        endpoint = repo.get_endpoint(session, g.tenant_id, min(endpoint_id, MAX_ID))
        if endpoint is None:
            return _missing(endpoint_id)
        repo.delete_endpoint(session, endpoint)
    return "", 204


@bp.post("/<int:endpoint_id>/roll-secret")
def roll(endpoint_id: int) -> ResponseReturnValue:
    """A new secret, shown once; the old one signs beside it for `overlap_seconds`."""
    overlap: Any = DEFAULT_OVERLAP
    if request.content_length or request.headers.get("Transfer-Encoding"):
        try:
            payload = read_json()
        except RequestError as exc:
            return json_error(400, str(exc))
        if not isinstance(payload, dict) or set(payload) - {"overlap_seconds"}:
            return json_error(400, "the body may only be an object with `overlap_seconds`")
        overlap = payload.get("overlap_seconds", DEFAULT_OVERLAP)
        if isinstance(overlap, float) and overlap.is_integer():
            overlap = int(overlap)  # an integer to JSON Schema, as the document's type says
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap <= MAX_OVERLAP:
        return json_error(400, f"overlap_seconds: must be a whole number from 0 to {MAX_OVERLAP}")
    with get_db().transaction() as session:
        endpoint = repo.get_endpoint(session, g.tenant_id, min(endpoint_id, MAX_ID))
        if endpoint is None:
            return _missing(endpoint_id)
        secret = repo.roll_secret(
            session, get_box(), endpoint, utcnow(), timedelta(seconds=overlap)
        )
        body = endpoint_json(endpoint, secret)
    return jsonify(body)
