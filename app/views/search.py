"""Search from every page: one match opens the message, several are listed (digits that
are both a message id and a number's last digits are several), and the list refreshes
itself like the other polled pages."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from app.auth import tenant_scope
from app.db import get_db
from app.repo.search import search_messages
from app.views.pages import is_htmx, now, scope_args, staff_blueprint

bp = staff_blueprint("search", __name__)


@bp.get("/search")
def index() -> ResponseReturnValue:
    text = request.args.get("q", "").strip()[:200]
    hits = []
    if text:
        with get_db().transaction() as session:
            hits = search_messages(session, text, tenant_scope())
    if is_htmx():  # the results' poll: the list as it is now, never a redirect
        return render_template("search/_results.html", q=text, hits=hits, now=now())
    if len(hits) == 1:
        return redirect(url_for("messages.detail", message_id=hits[0].id, **scope_args()))
    return render_template("search/results.html", q=text, hits=hits, now=now())
