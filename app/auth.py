"""Staff sessions for the dashboard: Flask-Login for who is signed in, Flask-WTF for CSRF,
roles, and the tenant scope every dashboard query is filtered by.

Roles are ordered: a `viewer` reads; an `operator` also requeues, pauses and resumes; an
`admin` also manages staff and identities. Staff of a tenant see that tenant only;
platform staff (no tenant) see every tenant and may narrow to one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps
from typing import Any, TypeVar, cast

from flask import (
    Flask,
    Request,
    Response,
    abort,
    current_app,
    flash,
    redirect,
    request,
    session,
    url_for,
)
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface, SessionMixin
from flask_login import LoginManager, UserMixin, current_user, login_user
from flask_wtf.csrf import CSRFProtect

from app.clock import utcnow
from app.db import get_db
from app.inputs import parse_id
from app.repo.logins import StaffMember, load_staff

ROLE_RANK = {"viewer": 0, "operator": 1, "admin": 2}
# Idle: a session nobody used for this long is refused (the signed cookie's age, slid by
# what a person does). Absolute: however busy, a session ends this long after sign-in.
SESSION_LIFETIME = timedelta(hours=12)
SESSION_ABSOLUTE_LIFETIME = timedelta(hours=24)
SIGNED_IN_AT = "signed_in_at"
CLOCK_SKEW = timedelta(minutes=5)
SESSION_ID = re.compile(r"([0-9]{1,18}):([0-9]{1,18})")

login_manager = LoginManager()
csrf = CSRFProtect()

F = TypeVar("F", bound=Callable[..., Any])


class SignedInStaff(UserMixin):
    """The signed-in staff member, as Flask-Login wants it."""

    def __init__(self, member: StaffMember) -> None:
        self.member = member

    def get_id(self) -> str:
        # Flask-Login keeps this in the session: the login's session version rides along,
        # so moving the version (sign-out, password reset, disable, role change) ends it.
        return f"{self.member.id}:{self.member.session_version}"

    @property
    def email(self) -> str:
        return self.member.email

    @property
    def role(self) -> str:
        return self.member.role

    @property
    def tenant_id(self) -> int | None:
        return self.member.tenant_id

    @property
    def tenant_name(self) -> str | None:
        return self.member.tenant_name

    @property
    def time_zone(self) -> str | None:
        return self.member.time_zone

    @property
    def is_platform(self) -> bool:
        return self.member.tenant_id is None

    def can(self, role: str) -> bool:
        return ROLE_RANK.get(self.member.role, -1) >= ROLE_RANK[role]


def staff() -> SignedInStaff:
    """The signed-in staff member (call only behind `login_required`)."""
    return cast(SignedInStaff, current_user._get_current_object())


def requires_role(role: str) -> Callable[[F], F]:
    """403 for a signed-in staff member below `role` (sign-in is checked before this)."""

    def decorator(view: F) -> F:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not staff().can(role):
                abort(403)
            return view(*args, **kwargs)

        return cast(F, wrapper)

    return decorator


def tenant_scope() -> int | None:
    """The tenant every query of this request is limited to; None: every tenant.

    A tenant's staff are always limited to their own tenant, whatever the URL says.
    Platform staff may narrow to one with `?tenant=ID`.
    """
    member = staff()
    if member.tenant_id is not None:
        return member.tenant_id
    return parse_id(request.args.get("tenant"))


class QuietPollSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, except that a background htmx GET (a table polling
    itself every few seconds) never sends the cookie back unless it changed the session.

    Flask re-sends a permanent session's cookie on every response to slide its expiry. A
    poll's response carries the session as the poll read it, so a poll that left before an
    operator's POST and came back after it overwrote the POST's cookie: the flash saying
    what the action did was lost (two tabs, one watching the overview, made it happen). A
    poll also should not keep an unattended tab's session alive for ever: only what a
    person does slides the 12 hours.
    """

    # The machine-facing areas: a provider's webhook or a tenant's system, authenticated by
    # signature or key, never by cookie. Reading (and signing) a cookie they never send
    # cost a webhook delivery as much CPU as one of its SQL statements.
    MACHINE_PATHS = ("/webhooks/", "/v1/")

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if request.path.startswith(self.MACHINE_PATHS):
            return self.make_null_session(app)
        return super().open_session(app, request)

    def should_set_cookie(self, app: Flask, session: SessionMixin) -> bool:
        if session.modified:
            return True
        if request.method == "GET" and request.headers.get("HX-Request") == "true":
            return False
        return super().should_set_cookie(app, session)


def init_app(app: Flask) -> None:
    config = app.config["RATCHET"]
    app.session_interface = QuietPollSessions()
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=config.public_base_url.startswith("https://"),
        REMEMBER_COOKIE_HTTPONLY=True,
        REMEMBER_COOKIE_SAMESITE="Lax",
        REMEMBER_COOKIE_SECURE=config.public_base_url.startswith("https://"),
        PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME,
        # A support page stays open for hours: the token lives as long as the session.
        WTF_CSRF_TIME_LIMIT=None,
    )
    login_manager.login_view = "auth.sign_in"
    login_manager.login_message = "Sign in to see that page."
    login_manager.login_message_category = "info"
    login_manager.init_app(app)
    csrf.init_app(app)

    @login_manager.unauthorized_handler
    def _unauthorized() -> Response:
        target = url_for("auth.sign_in", next=request.full_path.rstrip("?"))
        if request.headers.get("HX-Request") == "true":
            # A poll whose session ended: send the whole page to sign-in, not into a table.
            response = Response(status=401)
            response.headers["HX-Redirect"] = target
            return response
        flash("Sign in to see that page.", "info")
        return redirect(target)  # type: ignore[return-value]

    @login_manager.user_loader
    def _load(user_id: str) -> SignedInStaff | None:
        found = SESSION_ID.fullmatch(user_id)
        if found is None or not _within_absolute_lifetime():
            return None
        with get_db().transaction() as db_session:
            member = load_staff(db_session, int(found.group(1)))
        if member is None or member.session_version != int(found.group(2)):
            return None
        return SignedInStaff(member)


def _within_absolute_lifetime() -> bool:
    raw = session.get(SIGNED_IN_AT)
    if not isinstance(raw, str):
        return False
    try:
        signed_in_at = datetime.fromisoformat(raw)
    except ValueError:
        return False
    now = dashboard_now()
    # A little slack before: another host's clock may run a moment behind the one that
    # signed the session in.
    return signed_in_at - CLOCK_SKEW <= now < signed_in_at + SESSION_ABSOLUTE_LIFETIME


def dashboard_now() -> datetime:
    """The dashboard's clock: tests pass theirs in as `app.extensions["ratchet.clock"]`."""
    clock: Callable[[], datetime] = current_app.extensions.get("ratchet.clock", utcnow)
    return clock()


def start_session(member: StaffMember) -> None:
    """Sign `member` in on a fresh session that remembers when, for the absolute lifetime."""
    login_user(SignedInStaff(member))
    session.permanent = True
    session[SIGNED_IN_AT] = dashboard_now().isoformat()
