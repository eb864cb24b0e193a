"""Stuck messages (`/stuck`): queued or sending past the threshold, oldest first, and why."""

from __future__ import annotations

from flask import render_template
from flask.typing import ResponseReturnValue

from app.auth import tenant_scope
from app.db import get_db
from app.repo.overview import stuck_messages
from app.views.pages import is_htmx, now, staff_blueprint, stuck_after

bp = staff_blueprint("stuck", __name__)


@bp.get("/stuck")
def index() -> ResponseReturnValue:
    moment, threshold = now(), stuck_after()
    with get_db().transaction() as session:
        messages = stuck_messages(session, moment, threshold, tenant_scope())
    context = {"messages": messages, "now": moment, "stuck_after": threshold}
    template = "stuck/_table.html" if is_htmx() else "stuck/index.html"
    return render_template(template, **context), 200, {"Vary": "HX-Request"}
