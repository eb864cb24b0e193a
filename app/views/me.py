"""A staff member's own settings (`/me`): the time zone every page shows times in (UTC
stays on hover). Anyone signed in may set their own, and only their own."""

from __future__ import annotations

from functools import cache
from zoneinfo import available_timezones

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from app.auth import staff
from app.db import get_db
from app.repo.logins import set_time_zone
from app.repo.staff import record_audit
from app.views.pages import now, scope_args, staff_blueprint

bp = staff_blueprint("me", __name__)


@cache
def zones() -> list[str]:
    return sorted(zone for zone in available_timezones() if "/" in zone)


@bp.get("/me")
def index() -> ResponseReturnValue:
    return render_template("me/index.html", zones=zones(), current=staff().time_zone)


@bp.post("/me/time-zone")
def time_zone() -> ResponseReturnValue:
    chosen = request.form.get("time_zone", "").strip()
    if chosen and chosen not in zones():
        flash(f"Not saved: {chosen[:64]!r} is not a time zone this server knows.", "refused")
        return redirect(url_for("me.index", **scope_args()))
    with get_db().transaction() as session:
        set_time_zone(session, staff().member.id, chosen or None)
        record_audit(
            session,
            staff().email,
            "staff.time_zone",
            f"staff:{staff().member.id}",
            now(),
            {"time_zone": chosen or "UTC", "via": "web"},
            tenant_id=staff().tenant_id,
        )
    flash(f"Times now show in {chosen or 'UTC'} (UTC on hover).", "ok")
    return redirect(url_for("me.index", **scope_args()))
