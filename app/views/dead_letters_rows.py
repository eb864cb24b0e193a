"""The dead-letter list's refresh (`/dead-letters/rows`): the rows a page shows, as they are
now, polled every 15 s and morphed in place (keyboard focus and scroll stay).

Rows never move under the pointer: the poll asks for the ids the page loaded with, in
their order, so a row requeued or dismissed by a colleague changes in place and none is
added above the one a person is about to click; the "N new" badge (dead_letters_new)
offers the dead letters that failed since.

A row requeued since the page loaded keeps saying so (when, by whom, which cycle) beside
what became of it (its state now, or its new failure), instead of losing the confirmation
to the next refresh."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import render_template, request, url_for
from flask.typing import ResponseReturnValue

from app.auth import tenant_scope
from app.db import get_db
from app.inputs import parse_id
from app.models import MessageEvent
from app.repo.deadletters import DeadLetterRow, dead_letter_row
from app.repo.events import requeues_since
from app.repo.timeline import scoped_message
from app.views.pages import absolute, now, staff_blueprint

bp = staff_blueprint("dead_letters_rows", __name__)

# A page shows at most RATCHET_PAGE_SIZE rows; the poll reads no more than this.
MOST_IDS = 200


@dataclass(frozen=True, slots=True)
class Told:
    """What a row says happened to it (the shape of a requeue's answer)."""

    words: str
    ok: bool


@dataclass(frozen=True, slots=True)
class ShownRow:
    """A row of the list: the dead letter (`row`), or, once it is no longer one, its state."""

    message_id: int
    row: DeadLetterRow | None
    status: str
    said: Told | None = None


def requeue_told(event: MessageEvent, row: DeadLetterRow | None) -> Told:
    """A requeue since the page loaded, and what became of it."""
    detail = event.detail or {}
    cycle = detail.get("new_cycle", event.cycle + 1)
    key = "same provider key" if detail.get("provider_key_cycle") != cycle else "new provider key"
    done = f"Requeued {absolute(event.received_at)} by {event.actor or 'someone'}: cycle {cycle}"
    if row is not None and row.message.cycle == cycle:
        return Told(f"{done}, {key}; that cycle failed too (below).", ok=False)
    return Told(f"{done}, {key}.", ok=True)


def loaded_at(raw: str | None) -> datetime | None:
    """When the page loaded (the poll's `loaded`), or None if absent or not an aware time."""
    try:
        loaded = datetime.fromisoformat(raw or "")
    except ValueError:
        return None
    return loaded if loaded.tzinfo is not None else None


def shown_rows(rows: list[DeadLetterRow]) -> list[ShownRow]:
    return [ShownRow(row.message.id, row, row.message.status) for row in rows]


def poll_ids(rows: list[ShownRow]) -> str:
    return ",".join(str(shown.message_id) for shown in rows)


@bp.get("/dead-letters/rows")
def rows() -> ResponseReturnValue:
    wanted = [parse_id(raw) for raw in request.args.get("ids", "").split(",")[:MOST_IDS]]
    scope = tenant_scope()
    loaded = loaded_at(request.args.get("loaded"))
    ids = list(dict.fromkeys(i for i in wanted if i is not None))
    found: list[ShownRow] = []
    with get_db().transaction() as session:
        requeued = requeues_since(session, ids, loaded) if loaded else {}
        for message_id in ids:
            row = dead_letter_row(session, message_id, scope)
            event = requeued.get(message_id)
            if row is not None:
                said = requeue_told(event, row) if event else None
                found.append(ShownRow(message_id, row, row.message.status, said))
                continue
            current = scoped_message(session, message_id, scope)
            if current is not None:  # another tenant's id is simply left out
                said = requeue_told(event, None) if event else None
                found.append(ShownRow(message_id, None, current.status, said))
    kept: dict[str, Any] = {
        k: v for k, v in request.args.items() if k not in ("ids", "after", "loaded") and v
    }
    return render_template(
        "dead_letters/_list.html",
        shown=found,
        ids=poll_ids(found),
        kept=kept,
        back=url_for("dead_letters.index", **kept),
        loaded=loaded,
        now=now(),
    )
