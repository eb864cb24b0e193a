"""Status callbacks (`/callbacks`, admins): each endpoint, why it is disabled if it is,
what waits, and its recent POSTs (status, latency, the receiver's answer cut and escaped);
replay one callback or everything since a time; enable or disable an endpoint. Replays
post the same `webhook-id` again: a receiver that deduplicates applies nothing twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import current_app, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import NotFound

from app.auth import requires_role, staff, tenant_scope
from app.callback_urls import CallbackUrlError, validate_callback_url
from app.crypto import get_box
from app.db import get_db
from app.inputs import parse_id
from app.repo import callback_page as page
from app.repo.callback_endpoints import EVENTS, EndpointError
from app.views.pages import now, scope_args, staff_blueprint
from jobs.callbacks import ring_endpoint

bp = staff_blueprint("callback_pages", __name__)


def _back() -> ResponseReturnValue:
    return redirect(url_for("callback_pages.index", **scope_args()))


def _ring(endpoint_id: int) -> None:
    ring_endpoint(endpoint_id, current_app.config["RATCHET"])  # else the sweeper's pass


def _page(shown: dict[str, str] | None = None, status: int = 200) -> ResponseReturnValue:
    with get_db().transaction() as session:
        rows = page.endpoint_rows(session, tenant_scope())
    context = {"rows": rows, "now": now(), "shown": shown, "events": EVENTS}
    return render_template("callbacks/index.html", **context), status


@bp.get("/callbacks")
@requires_role("admin")
def index() -> ResponseReturnValue:
    return _page()


@bp.post("/callbacks")
@requires_role("admin")
def create() -> ResponseReturnValue:
    """Register an endpoint for the tenant in scope; its secret is on this answer only."""
    tenant_id = tenant_scope()
    if tenant_id is None:
        flash("Choose a tenant first: an endpoint belongs to one.", "error")
        return _back()
    events = [e for e in request.form.getlist("events") if e in EVENTS] or list(EVENTS)
    try:
        target = validate_callback_url(
            request.form.get("url", "").strip(), current_app.config["RATCHET"].callback_allow_hosts
        )
        with get_db().transaction() as session:
            endpoint, secret = page.add_endpoint(
                session,
                get_box(),
                tenant_id,
                target.url,
                target.host,
                events,
                staff().email,
                now(),
            )
            shown = {"what": f"Endpoint {endpoint.id} registered", "secret": secret}
    except (CallbackUrlError, EndpointError) as exc:
        flash(f"Not registered: {exc}", "error")
        return _page(status=400)
    return _page(shown)


@bp.post("/callbacks/<int:endpoint_id>/roll-secret")
@requires_role("admin")
def roll(endpoint_id: int) -> ResponseReturnValue:
    """A new secret, on this answer only; the old one signs beside it for a day."""
    try:
        with get_db().transaction() as session:
            endpoint, secret = page.roll(
                session,
                get_box(),
                tenant_scope(),
                endpoint_id,
                timedelta(days=1),
                staff().email,
                now(),
            )
            shown = {"what": f"Endpoint {endpoint.id}'s secret rolled", "secret": secret}
    except page.NotYoursError:
        raise NotFound() from None
    return _page(shown)


@bp.post("/callbacks/<int:endpoint_id>/replay")
@requires_role("admin")
def replay(endpoint_id: int) -> ResponseReturnValue:
    raw = request.form.get("callback_id", "").strip().removeprefix("cb_")
    callback_id = parse_id(raw)
    if callback_id is None:
        flash("Give the callback's number (cb_123 or 123).", "error")
        return _back()
    try:
        with get_db().transaction() as session:
            page.replay_one(session, tenant_scope(), endpoint_id, callback_id, staff().email, now())
    except page.NotYoursError:
        flash(f"No callback cb_{raw} of endpoint {endpoint_id}.", "error")
        return _back()
    _ring(endpoint_id)
    flash(f"cb_{raw} will be posted again, under the same webhook-id.", "ok")
    return _back()


@bp.post("/callbacks/<int:endpoint_id>/replay-since")
@requires_role("admin")
def replay_since(endpoint_id: int) -> ResponseReturnValue:
    raw = request.form.get("since", "").strip()
    try:
        since = datetime.fromisoformat(raw)
    except ValueError:
        flash("Give a time like 2026-12-04T09:30 (UTC).", "error")
        return _back()
    since = since.replace(tzinfo=UTC) if since.tzinfo is None else since.astimezone(UTC)
    try:
        with get_db().transaction() as session:
            count = page.replay_from(
                session, tenant_scope(), endpoint_id, since, staff().email, now()
            )
    except page.NotYoursError:
        raise NotFound() from None
    _ring(endpoint_id)
    flash(f"{count} callbacks since {since:%Y-%m-%d %H:%M} UTC will be posted again.", "ok")
    return _back()


@bp.post("/callbacks/<int:endpoint_id>/enable")
@requires_role("admin")
def enable(endpoint_id: int) -> ResponseReturnValue:
    enabled = request.form.get("enabled") == "1"
    try:
        with get_db().transaction() as session:
            page.set_enabled(session, tenant_scope(), endpoint_id, enabled, staff().email, now())
    except page.NotYoursError:
        raise NotFound() from None
    if enabled:
        _ring(endpoint_id)
    what = "enabled: what piled up goes out in order" if enabled else "disabled: kept"
    flash(f"Endpoint {endpoint_id} {what}.", "ok")
    return _back()
