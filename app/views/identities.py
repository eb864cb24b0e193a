"""Identities (`/identities`): each sender's provider, rates, pace, pauses, open windows and
default validity per lane; pause and resume (the whole identity or its campaign lane) for
operators; rates, secret replacement and the default validity for admins. Secrets are
write-only: the page shows when they were set, never them. Every action is one transaction
with its audit row; drains are rung after it."""

from __future__ import annotations

import math

from flask import current_app, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from redis.exceptions import RedisError
from werkzeug.exceptions import NotFound

from app.auth import requires_role, staff, tenant_scope
from app.crypto import get_box
from app.db import get_db
from app.repo import identity_actions
from app.repo.identities import BusinessAccountError, RatesError, TokenError
from app.repo.identity_page import IdentityNotFoundError, identity_rows, scoped_identity
from app.repo.identity_validity import set_default_validity
from app.validity import LANES, ValidityError, describe_validity, parse_validity
from app.views.pages import is_htmx, now, scope_args, staff_blueprint
from jobs.pacing import Pace, paces
from jobs.queues import get_redis
from jobs.registry import read_live_by_lane
from jobs.ringing import ring_after_new_rates, ring_message

bp = staff_blueprint("identities", __name__)

MAX_RATE = 10_000.0
MAX_SECRET = 4096


def _back() -> ResponseReturnValue:
    return redirect(url_for("identities.index", **scope_args()))


def _current_paces(ids: list[int]) -> dict[int, Pace] | None:
    """None when Redis does not answer: the page says the pace is unknown, and still works."""
    try:
        return paces(get_redis(), ids)
    except (RedisError, OSError):
        return None


@bp.get("/identities")
def index() -> ResponseReturnValue:
    moment = now()
    with get_db().transaction() as session:
        rows = identity_rows(session, tenant_scope(), moment)
    context = {
        "rows": rows,
        "paces": _current_paces([r.id for r in rows]),
        "live": read_live_by_lane(get_redis()),
        "now": moment,
    }
    template = "identities/_table.html" if is_htmx() else "identities/index.html"
    return render_template(template, **context), 200, {"Vary": "HX-Request"}


def _scope_from_form() -> str:
    scope = request.form.get("scope", identity_actions.WHOLE)
    return scope if scope in identity_actions.SCOPES else identity_actions.WHOLE


def _what(identity_id: int, scope: str) -> str:
    if scope == identity_actions.CAMPAIGN:
        return f"Identity {identity_id}, campaign lane"
    return f"Identity {identity_id}"


@bp.post("/identities/<int:identity_id>/pause")
@requires_role("operator")
def pause(identity_id: int) -> ResponseReturnValue:
    scope = _scope_from_form()
    reason = request.form.get("reason", "")
    try:
        with get_db().transaction() as session:
            identity = scoped_identity(session, identity_id, tenant_scope())
            paused = identity_actions.pause(
                session,
                identity,
                scope=scope,
                reason=reason,
                actor=staff().email,
                now=now(),
                via="web",
            )
    except IdentityNotFoundError as exc:
        raise NotFound() from exc
    except identity_actions.IdentityActionError as exc:
        flash(f"{_what(identity_id, scope)} not paused: {exc}.", "refused")
        return _back()
    if not paused.done:
        flash(f"{_what(identity_id, scope)} was already paused; nothing changed.", "refused")
    elif scope == identity_actions.CAMPAIGN:
        flash(
            f"{_what(identity_id, scope)} paused: holds {paused.holds:,} campaign messages; "
            "replies go on.",
            "ok",
        )
    else:
        flash(
            f"{_what(identity_id, scope)} paused: holds {paused.holds:,} messages on both lanes.",
            "ok",
        )
    return _back()


@bp.post("/identities/<int:identity_id>/resume")
@requires_role("operator")
def resume(identity_id: int) -> ResponseReturnValue:
    scope = _scope_from_form()
    try:
        with get_db().transaction() as session:
            identity = scoped_identity(session, identity_id, tenant_scope())
            resumed = identity_actions.resume(
                session, identity, scope=scope, actor=staff().email, now=now(), via="web"
            )
    except IdentityNotFoundError as exc:
        raise NotFound() from exc
    if not resumed.done:
        flash(f"{_what(identity_id, scope)} was not paused; nothing changed.", "refused")
        return _back()
    # Committed above; only now ring each lane's drain (a lost ring: the sweeper's job).
    rung = all([ring_message(0, lane, identity_id) for lane in resumed.lanes])
    words = f"{_what(identity_id, scope)} resumed: {resumed.due_now:,} due now."
    if not rung:
        words += " Redis is unreachable: the sweeper will ring them within a minute."
    flash(words, "ok")
    return _back()


def _rate(name: str) -> float | None:
    raw = request.form.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RatesError(f"the {name.replace('_', ' ')} {raw[:20]!r} is not a number") from None
    if not math.isfinite(value) or value > MAX_RATE:
        raise RatesError(f"the {name.replace('_', ' ')} must be a number up to {MAX_RATE:g}/s")
    return value


@bp.post("/identities/<int:identity_id>/rates")
@requires_role("admin")
def rates(identity_id: int) -> ResponseReturnValue:
    try:
        with get_db().transaction() as session:
            identity = scoped_identity(session, identity_id, tenant_scope())
            changed = identity_actions.change(
                session,
                get_box(),
                identity,
                actor=staff().email,
                now=now(),
                via="web",
                reply_rate=_rate("reply_rate"),
                campaign_rate=_rate("campaign_rate"),
                total_rate=_rate("total_rate"),
            )
    except IdentityNotFoundError as exc:
        raise NotFound() from exc
    except RatesError as exc:
        flash(f"Rates of identity {identity_id} not changed: {exc}.", "refused")
        return _back()
    if changed:
        # Committed: a new shard count's drains are rung now, not at the sweeper's pass.
        rung = ring_after_new_rates(identity_id, current_app.config["RATCHET"])
        flash(
            f"Identity {identity_id}: {', '.join(changed)} changed; the next batch uses them."
            + ("" if rung else " Redis is unreachable: the sweeper will ring the drains."),
            "ok",
        )
    else:
        flash(f"Identity {identity_id}: no rate given; nothing changed.", "refused")
    return _back()


@bp.post("/identities/<int:identity_id>/credentials")
@requires_role("admin")
def credentials(identity_id: int) -> ResponseReturnValue:
    token = request.form.get("token", "").strip() or None
    app_secret = request.form.get("app_secret", "").strip() or None
    if token is None and app_secret is None:
        flash(f"Identity {identity_id}: no token or secret given; nothing changed.", "refused")
        return _back()
    if any(value and (len(value) > MAX_SECRET or "\x00" in value) for value in (token, app_secret)):
        flash(f"Identity {identity_id}: that value cannot be a token or secret.", "refused")
        return _back()
    try:
        with get_db().transaction() as session:
            identity = scoped_identity(session, identity_id, tenant_scope())
            changed = identity_actions.change(
                session,
                get_box(),
                identity,
                actor=staff().email,
                now=now(),
                via="web",
                token=token,
                app_secret=app_secret,
            )
    except IdentityNotFoundError as exc:
        raise NotFound() from exc
    except TokenError as exc:
        flash(f"Identity {identity_id}: nothing changed: {exc}.", "refused")
        return _back()
    flash(
        f"Identity {identity_id}: new {' and '.join(changed)} stored (not shown again). "
        "A broken-sender answer to an earlier attempt will not pause it again.",
        "ok",
    )
    return _back()


@bp.post("/identities/<int:identity_id>/business-account")
@requires_role("admin")
def business_account(identity_id: int) -> ResponseReturnValue:
    """A WhatsApp number's business account (WABA) id: Meta's account and template events
    name it, not the number (learned from a delivery too, when not given)."""
    value = request.form.get("business_account_id", "").strip()
    if not value:
        flash(f"Identity {identity_id}: no business account id given; nothing changed.", "refused")
        return _back()
    try:
        with get_db().transaction() as session:
            identity = scoped_identity(session, identity_id, tenant_scope())
            if identity.provider != "whatsapp":
                flash(f"Identity {identity_id}: only WhatsApp numbers have one.", "refused")
                return _back()
            identity_actions.change(
                session,
                get_box(),
                identity,
                actor=staff().email,
                now=now(),
                via="web",
                business_account_id=value,
            )
    except IdentityNotFoundError as exc:
        raise NotFound() from exc
    except BusinessAccountError as exc:
        flash(f"Identity {identity_id}: nothing changed: {exc}.", "refused")
        return _back()
    flash(f"Identity {identity_id}: business account {value} stored.", "ok")
    return _back()


@bp.post("/identities/<int:identity_id>/validity")
@requires_role("admin")
def validity(identity_id: int) -> ResponseReturnValue:
    """Each lane's default validity: seconds or `10m`, `24h`, `2d`; empty or `none` for no
    limit. A lane left out of the form keeps its value; one bad value changes nothing."""
    try:
        wanted = {
            lane: parse_validity(request.form[f"{lane}_valid_for"])
            for lane in LANES
            if f"{lane}_valid_for" in request.form
        }
        with get_db().transaction() as session:
            scoped_identity(session, identity_id, tenant_scope())
            changed = set_default_validity(
                session, identity_id, wanted, actor=staff().email, now=now(), via="web"
            )
    except IdentityNotFoundError as exc:
        raise NotFound() from exc
    except ValidityError as exc:
        flash(f"Default validity of identity {identity_id} not changed: {exc}.", "refused")
        return _back()
    if not changed:
        flash(f"Identity {identity_id}: default validity unchanged.", "refused")
        return _back()
    words = "; ".join(
        f"{lane} lane {describe_validity(before)} → {describe_validity(after)}"
        for lane, (before, after) in changed.items()
    )
    flash(f"Identity {identity_id}: default validity {words}. New messages take it.", "ok")
    return _back()
