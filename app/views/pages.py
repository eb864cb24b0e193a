"""What every dashboard page shares: the clock, the stuck threshold, and the filters the
templates use to show times, phones and states the same way everywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flask import Blueprint, Flask, current_app, has_request_context, render_template, request
from flask.typing import ResponseReturnValue
from flask_login import current_user
from flask_wtf.csrf import CSRFError
from markupsafe import Markup, escape
from werkzeug.exceptions import HTTPException

from app.auth import dashboard_now, login_manager, staff, tenant_scope
from app.db import get_db
from app.lifecycle import Status
from app.repo.overview import list_tenants
from app.validity import describe_validity, written_validity

# Glyph + word + colour class: a state is never told by colour alone.
STATE_GLYPHS = {
    Status.QUEUED.value: "○",
    Status.SENDING.value: "◐",
    Status.SENT.value: "✓",
    Status.DELIVERED.value: "✓✓",
    Status.READ.value: "✓✓",
    Status.FAILED.value: "✕",
}
FINAL_STATES = frozenset({Status.READ.value, Status.FAILED.value})


def now() -> datetime:
    """The dashboard's clock: tests pass theirs in as `app.extensions["ratchet.clock"]`."""
    return dashboard_now()


def stuck_after() -> timedelta:
    return timedelta(seconds=float(current_app.config["RATCHET_STUCK_AFTER"]))


def is_htmx() -> bool:
    """An HTMX request wants the partial only (htmx-flask reads the HX-Request header)."""
    return bool(getattr(request, "htmx", False))


def duration(delta: timedelta | None) -> str:
    """A short human duration: 42 s, 4 m 12 s, 3 h 5 m, 2 d 4 h."""
    if delta is None:
        return "-"
    seconds = int(abs(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} m {seconds} s" if seconds else f"{minutes} m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} m" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def call_time(delta: timedelta | None) -> str:
    """How long a provider call took, to the millisecond under a second (120 ms, 4.2 s):
    `duration`'s whole seconds would show every ordinary call as 0 s."""
    if delta is None:
        return "-"
    seconds = abs(delta.total_seconds())
    if round(seconds * 1000) < 1000:
        return f"{round(seconds * 1000)} ms"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    return duration(timedelta(seconds=round(seconds)))


# What a stored webhook status's result means, for the message page (`app/repo/inbox.py`).
STATUS_RESULTS = {
    "applied": "applied",
    "refused": "not applied: the state machine refused it (the timeline says why)",
    "duplicate": "duplicate of a status already received",
    "parked": "parked: no message has this provider id yet (its send's record may follow)",
    "stale": "not applied: it names an earlier cycle's send",
    "ignored": "ignored: a status before sent, or one Ratchet does not track",
    "expired": "expired: no message matched it in time",
    "unmatched": "unmatched: under a number Ratchet does not know",
}


def status_result(result: str | None) -> str:
    if result is None:
        return "not applied yet"
    return STATUS_RESULTS.get(result, result)


def staff_zone() -> ZoneInfo | None:
    """The signed-in staff member's own time zone; None (UTC) when unset or unknown."""
    if not has_request_context() or not current_user.is_authenticated:
        return None
    name = staff().time_zone
    try:
        return ZoneInfo(name) if name else None
    except (ZoneInfoNotFoundError, ValueError):
        return None


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def absolute(moment: datetime | None) -> str:
    """A time in the staff member's own zone (UTC when they chose none)."""
    if moment is None:
        return ""
    zone = staff_zone()
    if zone is None:
        return utc(moment)
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def relative(moment: datetime | None) -> Markup:
    """`4 m ago` (or `in 10 s`), with the absolute UTC time on hover and focus."""
    if moment is None:
        return Markup('<span class="muted">-</span>')
    delta = now() - moment
    words = f"{duration(delta)} ago" if delta >= timedelta(0) else f"in {duration(delta)}"
    stamp = absolute(moment)
    if staff_zone() is not None:
        stamp = f"{stamp} ({utc(moment)})"  # UTC on hover too
    return Markup(
        f'<time datetime="{escape(moment.isoformat())}" title="{escape(stamp)}" '
        f'tabindex="0">{escape(words)}</time>'
    )


def mask_phone(value: str | None) -> str:
    """Only the last four digits of a recipient; ids that are not phones are cut the same."""
    if not value:
        return ""
    return "…" + value[-4:] if len(value) > 4 else value


def hide_number(text: Any, number: str | None) -> Any:
    """`text` (a provider's verbatim answer, a raw webhook) with the recipient's number
    masked as everywhere else; an operator reveals it on the message's page (audited)."""
    digits = (number or "").lstrip("+")
    if not text or len(digits) < 5:
        return text
    masked = mask_phone(digits)
    return text.replace("+" + digits, masked).replace(digits, masked)


def mask_key(value: str | None) -> str:
    """A long key or id cut to its ends, enough to compare by eye."""
    if not value:
        return ""
    return value if len(value) <= 16 else f"{value[:8]}…{value[-6:]}"


def state_badge(status: str) -> Markup:
    glyph = STATE_GLYPHS.get(status, "?")
    return Markup(
        f'<span class="state state-{escape(status)}"><span aria-hidden="true">'
        f"{escape(glyph)}</span> {escape(status)}</span>"
    )


def _require_sign_in() -> ResponseReturnValue | None:
    if not current_user.is_authenticated:
        return login_manager.unauthorized()
    return None


ERROR_WORDS = {
    400: ("That request was refused", "Reload the page and try again."),
    403: ("Not allowed for your role", "Ask an operator or an admin to do this."),
    404: ("Not found", "There is no such page or message that you can see."),
}


def error_page(exc: HTTPException) -> ResponseReturnValue:
    code = exc.code or 500
    title, hint = ERROR_WORDS.get(code, (exc.name, ""))
    if isinstance(exc, CSRFError):
        title, hint = "The form had expired", "Reload the page and try again; nothing was changed."
    template = "errors/_error.html" if is_htmx() else "errors/error.html"
    return render_template(template, code=code, title=title, hint=hint), code


def staff_blueprint(name: str, import_name: str) -> Blueprint:
    """A blueprint of dashboard pages: every one of them requires a signed-in staff member,
    and its errors are pages a person can read."""
    bp = Blueprint(name, import_name)
    bp.before_request(_require_sign_in)
    for code in (403, 404):
        bp.register_error_handler(code, error_page)
    return bp


def scope_args() -> dict[str, Any]:
    """The tenant a platform staff member narrowed to, for links that keep it."""
    if not current_user.is_authenticated or not staff().is_platform:
        return {}
    chosen = tenant_scope()
    return {"tenant": chosen} if chosen is not None else {}


def _page_context() -> dict[str, object]:
    if not current_user.is_authenticated:
        return {"me": None, "scope": {}}
    member = staff()
    tenants: list[tuple[int, str]] = []
    if member.is_platform:
        with get_db().transaction() as session:
            tenants = list_tenants(session)
    return {
        "me": member,
        "tenants": tenants,
        "scope": scope_args(),
        "chosen_tenant": tenant_scope(),
    }


def init_app(app: Flask) -> None:
    # The age past which a due message counts as stuck (RATCHET_STUCK_AFTER, seconds),
    # read once with the rest of the settings; tests may set it on app.config.
    app.config.setdefault("RATCHET_STUCK_AFTER", app.config["RATCHET"].stuck_after)
    app.config.setdefault("RATCHET_PAGE_SIZE", 50)
    app.jinja_env.filters.update(
        duration=duration,
        call_time=call_time,
        status_result=status_result,
        absolute=absolute,
        relative=relative,
        mask_phone=mask_phone,
        hide_number=hide_number,
        mask_key=mask_key,
        state_badge=state_badge,
        validity=describe_validity,
        written_validity=written_validity,
    )
    app.jinja_env.globals.update(FINAL_STATES=FINAL_STATES)
    app.context_processor(_page_context)
    app.register_error_handler(CSRFError, error_page)
