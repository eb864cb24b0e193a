"""The dead-letter list's refresh (`/dead-letters/rows`): the rows a page shows, as they are
now, polled every 15 s and morphed in place (keyboard focus and scroll stay).

Rows never move under the pointer: the poll asks for the ids the page loaded with, in
their order, so a row requeued or dismissed by a colleague changes in place and none is
added above the one a person is about to click; the "N new" badge (dead_letters_new)
offers the dead letters that failed since."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import render_template, request, url_for
from flask.typing import ResponseReturnValue

from app.auth import tenant_scope
from app.db import get_db
from app.inputs import parse_id
from app.repo.deadletters import DeadLetterRow, dead_letter_row
from app.repo.timeline import scoped_message
from app.views.pages import now, staff_blueprint

bp = staff_blueprint("dead_letters_rows", __name__)

# A page shows at most RATCHET_PAGE_SIZE rows; the poll reads no more than this.
MOST_IDS = 200


@dataclass(frozen=True, slots=True)
class ShownRow:
    """A row of the list: the dead letter (`row`), or, once it is no longer one, its state."""

    message_id: int
    row: DeadLetterRow | None
    status: str


def shown_rows(rows: list[DeadLetterRow]) -> list[ShownRow]:
    return [ShownRow(row.message.id, row, row.message.status) for row in rows]


def poll_ids(rows: list[ShownRow]) -> str:
    return ",".join(str(shown.message_id) for shown in rows)


@bp.get("/dead-letters/rows")
def rows() -> ResponseReturnValue:
    wanted = [parse_id(raw) for raw in request.args.get("ids", "").split(",")[:MOST_IDS]]
    scope = tenant_scope()
    found: list[ShownRow] = []
    with get_db().transaction() as session:
        for message_id in dict.fromkeys(i for i in wanted if i is not None):
            row = dead_letter_row(session, message_id, scope)
            if row is not None:
                found.append(ShownRow(message_id, row, row.message.status))
                continue
            current = scoped_message(session, message_id, scope)
            if current is not None:  # another tenant's id is simply left out
                found.append(ShownRow(message_id, None, current.status))
    kept: dict[str, Any] = {
        k: v for k, v in request.args.items() if k not in ("ids", "after") and v
    }
    return render_template(
        "dead_letters/_list.html",
        shown=found,
        ids=poll_ids(found),
        kept=kept,
        back=url_for("dead_letters.index", **kept),
        now=now(),
    )
