"""The overview (`/`): one row per identity and lane, trouble first, refreshed in place."""

from __future__ import annotations

from flask import render_template
from flask.typing import ResponseReturnValue

from app.auth import tenant_scope
from app.db import get_db
from app.repo.overview import overview
from app.views.pages import is_htmx, now, staff_blueprint, stuck_after
from app.views.workers import read_workers

bp = staff_blueprint("overview", __name__)


@bp.get("/")
def index() -> ResponseReturnValue:
    moment, threshold = now(), stuck_after()
    with get_db().transaction() as session:
        rows = overview(session, moment, threshold, tenant_scope())
    context = {
        "rows": rows,
        "now": moment,
        "stuck_after": threshold,
        "seen": read_workers(rows),
    }
    template = "overview/_table.html" if is_htmx() else "overview/index.html"
    response = render_template(template, **context)
    return response, 200, {"Vary": "HX-Request"}
