"""Alerts (`/alerts`): what is firing now, the messages the dwell alert is about, and the
history of episodes with their figures when they fired and cleared; and the banner every
dashboard page shows while an alert fires (`/alerts/banner` refreshes it in place)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask import current_app, render_template
from flask.typing import ResponseReturnValue
from flask_login import current_user

from app.auth import tenant_scope
from app.db import get_db
from app.repo.alert_live import LiveFigure, live_figures
from app.repo.alert_signals import KIND_TITLES, dwelling_messages
from app.repo.alerts import FiringAlert, alert_history, firing_alerts, identity_labels
from app.views.pages import is_htmx, now, staff_blueprint

bp = staff_blueprint("alerts", __name__)


def _firing_in_scope() -> list[FiringAlert]:
    with get_db().transaction() as session:
        return firing_alerts(session, tenant_scope())


def _live(alerts: list[FiringAlert]) -> dict[int, LiveFigure]:
    """What the firing alerts read now, for the banner and the page (the figures they
    fired with are stored; these are read again on each render)."""
    if not alerts:
        return {}
    with get_db().transaction() as session:
        return live_figures(session, alerts, now())


@bp.app_template_filter("figure")
def figure(value: object) -> str:
    """An alert's figure as a person reads it: whole seconds, yes/no, UTC times."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        return value[:10] + " " + value[11:19] + " UTC"
    return str(value)


@bp.app_context_processor
def _banner_context() -> dict[str, Any]:
    """`alerts_firing()` for base.html's banner (called only when a whole page renders),
    and `alerts_live(alerts)` for their figures now."""
    if not current_user.is_authenticated:
        return {"alerts_firing": list, "alerts_live": _no_live, "alert_titles": KIND_TITLES}
    return {"alerts_firing": _firing_in_scope, "alerts_live": _live, "alert_titles": KIND_TITLES}


def _no_live(alerts: list[FiringAlert]) -> dict[int, LiveFigure]:
    return {}


@bp.get("/alerts/banner")
def banner() -> ResponseReturnValue:
    return (
        render_template("alerts/_banner.html", alerts=_firing_in_scope()),
        200,
        {"Vary": "HX-Request"},
    )


@bp.get("/alerts")
def index() -> ResponseReturnValue:
    moment = now()
    config = current_app.config["RATCHET"]
    dwell = timedelta(hours=config.alert_dwell_hours)
    with get_db().transaction() as session:
        firing = firing_alerts(session, tenant_scope())
        history = alert_history(session, tenant_scope())
        dwelling = dwelling_messages(session, moment, dwell, tenant_scope())
        ids = {e.identity_id for e in history if e.identity_id is not None}
        labels = identity_labels(session, ids | {m.identity_id for m in dwelling})
    context: dict[str, Any] = {
        "firing": firing,
        "history": history,
        "dwelling": dwelling,
        "labels": labels,
        "now": moment,
        "dwell_hours": config.alert_dwell_hours,
        "titles": KIND_TITLES,
    }
    template = "alerts/_firing.html" if is_htmx() else "alerts/index.html"
    return render_template(template, **context), 200, {"Vary": "HX-Request"}
