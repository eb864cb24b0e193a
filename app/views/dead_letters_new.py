"""The dead-letter page's "N new" badge (`/dead-letters/new`): rows never move under the
pointer, so instead of refreshing the list, a badge polled every 15 s counts the dead
letters matching the page's filters that failed since it was loaded, and links to them."""

from __future__ import annotations

from datetime import datetime

from flask import render_template, request
from flask.typing import ResponseReturnValue

from app.db import get_db
from app.repo.deadletters import count_failed_since
from app.views.dead_letters import dead_letter_filters
from app.views.pages import staff_blueprint

bp = staff_blueprint("dead_letters_new", __name__)


@bp.get("/dead-letters/new")
def badge() -> ResponseReturnValue:
    try:
        since = datetime.fromisoformat(request.args.get("since", ""))
    except ValueError:
        return "", 400
    if since.tzinfo is None:
        return "", 400
    with get_db().transaction() as session:
        fresh = count_failed_since(session, dead_letter_filters(), since)
    kept = {k: v for k, v in request.args.items() if k not in ("since", "after") and v}
    return render_template("dead_letters/_new.html", fresh=fresh, since=since, kept=kept)
