"""Staff (`/staff`, admins): create a login with a role, change a role, disable or enable
a login, reset a password. A tenant's admin manages that tenant's staff only; a new or
reset password is shown once, on the answer to the form, and stored hashed."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import NotFound

from app.auth import requires_role, staff, tenant_scope
from app.db import get_db
from app.inputs import parse_id
from app.repo import staff_admin
from app.repo.overview import list_tenants
from app.repo.staff import ROLES
from app.views.pages import now, scope_args, staff_blueprint

bp = staff_blueprint("staff_admin", __name__)
bp.before_request(requires_role("admin")(lambda: None))


def _actor() -> staff_admin.Actor:
    member = staff()
    return staff_admin.Actor(member.member.id, member.email, member.tenant_id)


def _page(shown: dict[str, str] | None = None, status: int = 200) -> ResponseReturnValue:
    with get_db().transaction() as session:
        rows = staff_admin.list_staff(session, tenant_scope())
        tenants = list_tenants(session) if staff().is_platform else []
    context = {"rows": rows, "roles": ROLES, "all_tenants": tenants, "shown": shown, "now": now()}
    return render_template("staff_admin/index.html", **context), status


def _back() -> ResponseReturnValue:
    return redirect(url_for("staff_admin.index", **scope_args()))


@bp.get("/staff")
def index() -> ResponseReturnValue:
    return _page()


@bp.post("/staff")
def create() -> ResponseReturnValue:
    actor = _actor()
    if actor.tenant_id is not None:
        tenant_id: int | None = actor.tenant_id  # never platform staff, whatever was posted
    else:
        raw = request.form.get("tenant", "")
        tenant_id = parse_id(raw)
    password = request.form.get("password", "") or None
    try:
        with get_db().transaction() as session:
            row, password = staff_admin.create(
                session,
                actor,
                email=request.form.get("email", ""),
                role=request.form.get("role", ""),
                tenant_id=tenant_id,
                password=password,
                now=now(),
            )
    except staff_admin.StaffActionError as exc:
        flash(f"Not created: {exc}.", "refused")
        return _back()
    return _page({"email": row.email, "role": row.role, "password": password, "what": "created"})


@bp.post("/staff/<int:staff_id>/role")
def role(staff_id: int) -> ResponseReturnValue:
    wanted = request.form.get("role", "")
    try:
        with get_db().transaction() as session:
            changed = staff_admin.change_role(session, _actor(), staff_id, wanted, now())
    except staff_admin.StaffNotFoundError as exc:
        raise NotFound() from exc
    except staff_admin.StaffActionError as exc:
        flash(f"Role not changed: {exc}.", "refused")
        return _back()
    if changed:
        flash(
            f"Staff {staff_id} is now {wanted}; their open sessions have ended, "
            "and it applies when they sign in again.",
            "ok",
        )
    else:
        flash(f"Staff {staff_id} already was {wanted}; nothing changed.", "refused")
    return _back()


@bp.post("/staff/<int:staff_id>/disable")
def disable(staff_id: int) -> ResponseReturnValue:
    return _set_disabled(staff_id, True)


@bp.post("/staff/<int:staff_id>/enable")
def enable(staff_id: int) -> ResponseReturnValue:
    return _set_disabled(staff_id, False)


def _set_disabled(staff_id: int, disabled: bool) -> ResponseReturnValue:
    try:
        with get_db().transaction() as session:
            changed = staff_admin.set_disabled(session, _actor(), staff_id, disabled, now())
    except staff_admin.StaffNotFoundError as exc:
        raise NotFound() from exc
    except staff_admin.StaffActionError as exc:
        flash(f"Not disabled: {exc}.", "refused")
        return _back()
    if not changed:
        flash(f"Staff {staff_id} already was {'disabled' if disabled else 'enabled'}.", "refused")
    elif disabled:
        flash(f"Staff {staff_id} disabled: cannot sign in, and open sessions have ended.", "ok")
    else:
        flash(f"Staff {staff_id} enabled: can sign in again.", "ok")
    return _back()


@bp.post("/staff/<int:staff_id>/password")
def password(staff_id: int) -> ResponseReturnValue:
    try:
        with get_db().transaction() as session:
            new = staff_admin.reset_password(session, _actor(), staff_id, now())
            email = next(
                (
                    r.email
                    for r in staff_admin.list_staff(session, tenant_scope())
                    if r.id == staff_id
                ),
                f"staff {staff_id}",
            )
    except staff_admin.StaffNotFoundError as exc:
        raise NotFound() from exc
    return _page({"email": email, "role": "", "password": new, "what": "given a new password"})
