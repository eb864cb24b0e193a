"""Tenants (`/tenants`, platform admins): each tenant's intake limits and how long its
content is kept. A tenant's own staff cannot change their limits: the page is 403 to them."""

from __future__ import annotations

from flask import abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import NotFound

from app.auth import requires_role, staff
from app.db import get_db
from app.repo.tenant_settings import (
    SettingsError,
    TenantSettings,
    list_tenant_settings,
    set_tenant_settings,
)
from app.views.pages import now, scope_args, staff_blueprint

bp = staff_blueprint("tenant_settings", __name__)
bp.before_request(requires_role("admin")(lambda: None))


@bp.before_request
def platform_only() -> None:
    if not staff().is_platform:
        abort(403)


@bp.get("/tenants")
def index() -> ResponseReturnValue:
    with get_db().transaction() as session:
        rows = list_tenant_settings(session)
    return render_template("tenant_settings/index.html", rows=rows)


class FormError(ValueError):
    pass


def _number(name: str, kind: type[int] | type[float]) -> int | float | None:
    """An empty field lifts the limit."""
    raw = request.form.get(name, "").strip()
    if not raw:
        return None
    try:
        return kind(raw)
    except ValueError as exc:
        raise FormError(f"{name.replace('_', ' ')}: {raw!r} is not a number") from exc


@bp.post("/tenants/<int:tenant_id>/settings")
def update(tenant_id: int) -> ResponseReturnValue:
    try:
        rate = _number("max_requests_per_second", float)
        waiting = _number("max_waiting", int)
        days = _number("retention_days", int)
        if days is None:
            raise FormError("retention days: give a number of days")
        wanted = TenantSettings(rate, None if waiting is None else int(waiting), int(days))
        with get_db().transaction() as session:
            before = set_tenant_settings(
                session, tenant_id, wanted, actor=f"staff:{staff().email}", now=now()
            )
    except (FormError, SettingsError) as exc:
        flash(f"Not changed: {exc}.", "refused")
        return redirect(url_for("tenant_settings.index", **scope_args()))
    if before is None:
        raise NotFound()
    flash(f"{before.name}'s settings saved; they apply within a second.", "ok")
    return redirect(url_for("tenant_settings.index", **scope_args()))
