"""Signing staff in and out of the dashboard."""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.typing import ResponseReturnValue
from flask_login import current_user, logout_user

from app.auth import staff, start_session
from app.crypto import check_password, hash_password
from app.db import get_db
from app.repo.logins import end_sessions, load_staff
from app.repo.sign_in_throttle import reserve_attempt, settle_attempt
from app.repo.staff import record_audit, staff_with_email
from app.views.pages import now

if TYPE_CHECKING:
    from app.models import Staff

bp = Blueprint("auth", __name__)

BAD_LOGIN = "That email and password do not match a staff login."
EMAIL_LIMIT = 254
# The audit row's target column holds 100 characters: "staff:" and at most 90 of the email.
AUDIT_EMAIL_LIMIT = 90


@cache
def _decoy_hash(method: str) -> str:
    # Checked against when the email is unknown, so both cases take the same slow hash.
    # `method` (the app's) only keys the cache: `hash_password` reads the same setting.
    return hash_password("not the password of anyone")


def safe_next(target: str | None) -> str:
    """Only a path on this site: never another host (`//evil`, `https://evil`)."""
    if target:
        parts = urlsplit(target)
        local = not parts.scheme and not parts.netloc and target.startswith("/")
        if local and not target.startswith("//") and "\\" not in target:
            return target
    return url_for("overview.index")


def _clear_session() -> None:
    session.clear()
    # Flask-WTF caches the request's token in `g`; a cleared session needs a fresh one.
    g.pop("csrf_token", None)


def matching_login(candidates: list[Staff], password: str) -> Staff | None:
    """The enabled login, among those with the email, that the password opens (the oldest
    if several). Every candidate is checked, and the decoy when there is none, so the time
    taken does not tell which matched; a disabled login reads like a wrong password."""
    found = None
    pool: list[Staff | None] = [*candidates] or [None]
    for candidate in pool:
        if candidate is not None:
            hashed = candidate.password_hash
        else:
            hashed = _decoy_hash(current_app.config["RATCHET"].password_hash)
        opens = check_password(password, hashed)
        if opens and candidate is not None and candidate.disabled_at is None and found is None:
            found = candidate
    return found


def _printable(text: str, limit: int) -> str:
    """What an anonymous visitor typed, safe to keep: no control characters (a NUL is
    refused by PostgreSQL), and at most `limit` characters."""
    return "".join(ch for ch in text if ch.isprintable())[:limit]


def _wait_words(wait: timedelta) -> str:
    seconds = max(1, round(wait.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    return f"{max(1, round(seconds / 60))} min"


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in() -> ResponseReturnValue:
    if request.method == "GET":
        if current_user.is_authenticated:
            return redirect(safe_next(request.args.get("next")))
        return render_template("auth/sign_in.html", next=request.args.get("next", ""))
    typed = request.form.get("email", "")
    email = _printable(typed.strip().lower(), EMAIL_LIMIT)
    if email != typed.strip().lower():
        email = ""  # with control characters or too long: no login has it
    password = request.form.get("password", "")
    address = _printable(request.remote_addr or "unknown", 64)
    moment = now()
    # 1. Count the attempt before checking it (its own transaction, committed at once).
    with get_db().transaction() as db_session:
        wait = reserve_attempt(db_session, email, address, moment)
    if wait:
        error = f"Too many attempts; try again in {_wait_words(wait)}."
        page = render_template(
            "auth/sign_in.html", error=error, email=email, next=request.form.get("next", "")
        )
        return page, 429
    # 2. Check the password (slow on purpose), then settle the count and audit.
    member = None
    with get_db().transaction() as db_session:
        candidates = staff_with_email(db_session, email) if email else []
        found = matching_login(candidates, password)
        ok = found is not None
        settle_attempt(db_session, email, address, ok)
        # In the audit log too: a tenant's admins see their own staff's sign-ins (a failure
        # once for each tenant with a login of that email); an unknown email belongs to no
        # tenant (platform staff see it). What a visitor typed is kept bounded and printable.
        shown = _printable(email, AUDIT_EMAIL_LIMIT)
        tenants = (
            [found.tenant_id]
            if found
            else sorted({c.tenant_id for c in candidates}, key=lambda t: -1 if t is None else t)
            or [None]
        )
        for tenant_id in tenants:
            record_audit(
                db_session,
                shown or "(no email given)",
                "staff.sign_in" if ok else "staff.sign_in_failed",
                f"staff:{shown}" if shown else "staff:",
                moment,
                {"address": address, "via": "web"},
                tenant_id=tenant_id,
            )
        if ok and found is not None:
            member = load_staff(db_session, found.id)
    if member is None:
        page = render_template(
            "auth/sign_in.html", error=BAD_LOGIN, email=email, next=request.form.get("next", "")
        )
        return page, 401
    _clear_session()  # nothing from before sign-in survives it
    start_session(member)
    return redirect(safe_next(request.form.get("next")))


@bp.post("/sign-out")
def sign_out() -> ResponseReturnValue:
    if current_user.is_authenticated:
        # Every copy of this login's sessions ends too (a cookie copied before sign-out,
        # another browser): the login's session version moves.
        with get_db().transaction() as db_session:
            end_sessions(db_session, staff().member.id)
    logout_user()
    _clear_session()
    flash("Signed out.", "info")
    return redirect(url_for("auth.sign_in"))
