"""CSV exports of what a filtered list shows (`/dead-letters/export.csv`,
`/search/export.csv`): the same filters and tenant scope as the page, numbers masked as on
the page, no message bodies, and every cell that a spreadsheet would read as a formula
quoted with a leading apostrophe."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from datetime import datetime

from flask import Response, current_app, request

from app.auth import tenant_scope
from app.db import get_db
from app.repo.deadletters import Cursor, dead_letter_page
from app.repo.search import search_messages
from app.views.dead_letters import dead_letter_filters
from app.views.pages import mask_phone, staff_blueprint

bp = staff_blueprint("exports", __name__)

MAX_ROWS = 10_000  # a spreadsheet's worth; the page says when the export was cut there
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    if value is None:
        return ""
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _csv(name: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Response:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(value) for value in row])
    return Response(
        out.getvalue(),
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@bp.get("/dead-letters/export.csv")
def dead_letters_csv() -> Response:
    filters = dead_letter_filters()
    page_size = int(current_app.config["RATCHET_PAGE_SIZE"])
    rows: list[Sequence[object]] = []
    after: Cursor | None = None
    with get_db().transaction() as session:
        while len(rows) < MAX_ROWS:
            found, after = dead_letter_page(session, filters, after, limit=max(page_size, 500))
            for row in found:
                m, error = row.message, row.error
                rows.append(
                    [
                        m.id,
                        m.failed_at,
                        f"{row.provider} …{row.account_id[-4:]}",
                        m.lane,
                        mask_phone(m.recipient),
                        m.failure_class,
                        error.get("code"),
                        error.get("title"),
                        row.meaning,
                        row.action,
                        m.template_name,
                        m.campaign,
                        m.idempotency_key,
                        m.attempt,
                        m.cycle,
                    ]
                )
            if after is None:
                break
    header = [
        "message_id", "failed_at_utc", "identity", "lane", "to", "class", "code", "title",
        "meaning", "what_to_do", "template", "campaign", "idempotency_key", "attempts", "cycle",
    ]  # fmt: skip
    return _csv("dead-letters.csv", header, rows[:MAX_ROWS])


@bp.get("/search/export.csv")
def search_csv() -> Response:
    text = request.args.get("q", "").strip()[:200]
    with get_db().transaction() as session:
        hits = search_messages(session, text, tenant_scope()) if text else []
    header = [
        "message_id", "status", "identity", "lane", "to", "campaign", "template",
        "created_at_utc", "matched_on",
    ]  # fmt: skip
    return _csv(
        "search.csv",
        header,
        (
            [
                h.id,
                h.status,
                f"{h.provider} …{h.account_id[-4:]}",
                h.lane,
                mask_phone(h.recipient),
                h.campaign,
                h.template_name,
                h.created_at,
                h.matched,
            ]
            for h in hits
        ),
    )
