"""Dead letters (`/dead-letters`): failed messages, the actionable first, filtered, paged by
keyset, each with the provider's words verbatim, what they mean and what to do, and a
one-click requeue for operators that answers in the row itself."""

from __future__ import annotations

from datetime import timedelta

from flask import abort, current_app, flash, redirect, render_template, request
from flask.typing import ResponseReturnValue

from app.auth import requires_role, staff, tenant_scope
from app.db import get_db
from app.inputs import parse_id
from app.providers.base import FailureClass
from app.repo.campaigns import campaign_filter
from app.repo.cancels import MessageNotFoundError, dismiss_message, undismiss_message
from app.repo.deadletters import Cursor, Filters, dead_letter_page, dead_letter_row
from app.repo.overview import list_identities
from app.repo.timeline import scoped_message
from app.views.auth import safe_next
from app.views.dead_letters_rows import poll_ids, shown_rows
from app.views.pages import is_htmx, now, staff_blueprint
from app.views.requeueing import advice_not_read, run_requeue, shown_cycle
from jobs.queues import LANES

bp = staff_blueprint("dead_letters", __name__)

PERIODS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
CLASSES = [c.value for c in FailureClass]


def _int(name: str) -> int | None:
    raw = request.args.get(name, "").strip()
    return parse_id(raw)


def dead_letter_filters() -> Filters:
    """The page's filters from the query string (the CSV export reads the same)."""
    failure_class = request.args.get("class", "")
    period = request.args.get("period", "")
    lane = request.args.get("lane", "")
    return Filters(
        tenant_id=tenant_scope(),
        identity_id=_int("identity"),
        lane=lane if lane in LANES else None,
        failure_class=failure_class if failure_class in CLASSES else None,
        code=_int("code"),
        since=now() - PERIODS[period] if period in PERIODS else None,
        dismissed=request.args.get("dismissed") == "1",
        by=campaign_filter(request.args),
    )


@bp.get("/dead-letters")
def index() -> ResponseReturnValue:
    scope = tenant_scope()
    filters = dead_letter_filters()
    after = Cursor.decode(request.args.get("after"))
    with get_db().transaction() as session:
        rows, next_cursor = dead_letter_page(
            session, filters, after, limit=int(current_app.config["RATCHET_PAGE_SIZE"])
        )
        identities = list_identities(session, scope)
    kept = {k: v for k, v in request.args.items() if k != "after" and v}
    shown = shown_rows(rows)
    return render_template(
        "dead_letters/index.html",
        rows=rows,
        shown=shown,
        ids=poll_ids(shown),
        next_args={**kept, "after": next_cursor.encode()} if next_cursor else None,
        first_args=kept if after else None,
        export_args=kept,
        # The new-dead-letters badge carries its own `since` (when this page loaded).
        badge_args={k: v for k, v in kept.items() if k != "since"},
        identities=identities,
        classes=CLASSES,
        lanes=LANES,
        periods=PERIODS,
        args=request.args,
        # The list's refresh keeps saying what was requeued since this page loaded.
        loaded=now(),
        now=now(),
    )


@bp.post("/dead-letters/<int:message_id>/requeue")
@requires_role("operator")
def requeue(message_id: int) -> ResponseReturnValue:
    with get_db().transaction() as session:
        shown = dead_letter_row(session, message_id, tenant_scope())
    refused = advice_not_read(shown.action, request.form.get("against_advice")) if shown else None
    said = refused or run_requeue(message_id, shown_cycle(request.form.get("cycle")))
    if not is_htmx():
        flash(f"Message {message_id}: {said.words}", "ok" if said.ok else "refused")
        return redirect(safe_next(request.form.get("next")))
    with get_db().transaction() as session:
        row = dead_letter_row(session, message_id, tenant_scope())
        current = scoped_message(session, message_id, tenant_scope())
    return render_template(
        "dead_letters/_row.html",
        row=row,
        message_id=message_id,
        status=current.status if current else "queued",
        said=said,
        now=now(),
        back=request.form.get("next", ""),
    )


@bp.post("/dead-letters/<int:message_id>/dismiss")
@requires_role("operator")
def dismiss(message_id: int) -> ResponseReturnValue:
    """Take a dead letter a person has dealt with off the list; it stays searchable."""
    reason = request.form.get("reason", "").strip()[:500] or None
    try:
        with get_db().transaction() as session:
            outcome = dismiss_message(
                session,
                message_id,
                now(),
                actor=staff().email,
                reason=reason,
                tenant_id=tenant_scope(),
                expected_cycle=shown_cycle(request.form.get("cycle")),
            )
    except MessageNotFoundError:
        abort(404)
    words = (
        "Dismissed: off the list, still found by search and in the audit log."
        if outcome.dismissed
        else f"Not dismissed: {outcome.why_not}."
    )
    if not is_htmx():
        flash(f"Message {message_id}: {words}", "ok" if outcome.dismissed else "refused")
        return redirect(safe_next(request.form.get("next")))
    with get_db().transaction() as session:
        current = scoped_message(session, message_id, tenant_scope())
    return render_template(
        "dead_letters/_row.html",
        row=None,
        message_id=message_id,
        status=current.status if current else "failed",
        said=SaidWords(words, outcome.dismissed),
        now=now(),
        back=request.form.get("next", ""),
    )


@bp.post("/dead-letters/<int:message_id>/undismiss")
@requires_role("operator")
def undismiss(message_id: int) -> ResponseReturnValue:
    """Undo a dismissal: the dead letter is back on the actionable list."""
    try:
        with get_db().transaction() as session:
            outcome = undismiss_message(
                session,
                message_id,
                now(),
                actor=staff().email,
                tenant_id=tenant_scope(),
                expected_cycle=shown_cycle(request.form.get("cycle")),
            )
    except MessageNotFoundError:
        abort(404)
    words = (
        "Back on the dead-letter list."
        if outcome.dismissed
        else f"Not put back: {outcome.why_not}."
    )
    flash(f"Message {message_id}: {words}", "ok" if outcome.dismissed else "refused")
    return redirect(safe_next(request.form.get("next")))


class SaidWords:
    """What the row says after an action (the requeue's `Said` shape)."""

    def __init__(self, words: str, ok: bool) -> None:
        self.words = words
        self.ok = ok
