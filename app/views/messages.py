"""A message's page (`/messages/<id>`): its status widget, the failure and the safe next
step, its keys, the timeline, attempts, raw webhooks and audit rows. The recipient's number
is masked there as everywhere (in the provider's verbatim answers and raw webhooks too);
an operator reveals it with one click, audited."""

from __future__ import annotations

from flask import abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from app.auth import requires_role, staff, tenant_scope
from app.db import get_db
from app.late_statuses import late_failures
from app.repo.audit import audit_for_message
from app.repo.bulkplans import plans_touching
from app.repo.callback_outbox import message_callbacks
from app.repo.cancels import MessageNotFoundError, cancel_message
from app.repo.deadletters import advice
from app.repo.reveals import reveal_recipient as reveal_recipient_of
from app.repo.timeline import REFUSALS, MessageStory, message_story
from app.views.pages import is_htmx, now, scope_args, staff_blueprint
from app.views.requeueing import advice_not_read, run_requeue, shown_cycle
from app.views.ticket import held_by, ticket_summary

bp = staff_blueprint("messages", __name__)


def _story(message_id: int) -> MessageStory:
    with get_db().transaction() as session:
        story = message_story(session, message_id, tenant_scope())
    if story is None:
        abort(404)
    return story


def _context(story: MessageStory, *, full: bool = False) -> dict[str, object]:
    error = story.message.last_error or {}
    meaning, action = advice(
        story.identity.provider,
        story.message.failure_class,
        error.get("code"),
        error.get("subcode"),
    )
    extra: dict[str, object] = {}
    if full:
        # The audit rows that touched it (its own and its bulk plans'), and those plans.
        with get_db().transaction() as session:
            extra["audit"] = audit_for_message(session, story.message.id, tenant_scope())
            extra["plans"] = plans_touching(session, story.message.id)
            extra["callbacks"] = message_callbacks(session, story.message.id)
        extra["ticket"] = ticket_summary(story, meaning, now())
    return {
        **extra,
        "story": story,
        "m": story.message,
        "error": error,
        "meaning": meaning,
        "action": action,
        "refusals": REFUSALS,
        "late": late_failures(story.events),
        "held_by": held_by(story, now()),
        "now": now(),
    }


@bp.get("/messages/<int:message_id>")
def detail(message_id: int) -> ResponseReturnValue:
    return render_template("messages/detail.html", **_context(_story(message_id), full=True))


@bp.get("/messages/<int:message_id>/status")
def status(message_id: int) -> ResponseReturnValue:
    """The status widget alone; it polls itself until the message is read or failed."""
    response = render_template("messages/_status.html", **_context(_story(message_id)))
    return response, 200, {"Vary": "HX-Request"}


@bp.post("/messages/<int:message_id>/recipient")
@requires_role("operator")
def reveal_recipient(message_id: int) -> ResponseReturnValue:
    """The full number, one click away for an operator; the audit log records the look."""
    with get_db().transaction() as session:
        full = reveal_recipient_of(session, message_id, tenant_scope(), staff().email, now())
    if full is None:
        abort(404)
    if is_htmx():
        story = _story(message_id)
        return render_template("messages/_recipient.html", m=story.message, revealed=True)
    context = _context(_story(message_id), full=True)
    return render_template("messages/detail.html", revealed=True, **context)


@bp.post("/messages/<int:message_id>/requeue")
@requires_role("operator")
def requeue(message_id: int) -> ResponseReturnValue:
    force = request.form.get("force") == "1"
    reason = request.form.get("reason", "").strip()[:500] or None
    action = str(_context(_story(message_id))["action"])
    refused = None if force else advice_not_read(action, request.form.get("against_advice"))
    said = refused or run_requeue(
        message_id, shown_cycle(request.form.get("cycle")), force=force, reason=reason
    )
    if not is_htmx():
        flash(said.words, "ok" if said.ok else "refused")
        return redirect(url_for("messages.detail", message_id=message_id, **scope_args()))
    context = _context(_story(message_id))
    return render_template("messages/_requeue.html", said=said, oob_status=True, **context)


@bp.post("/messages/<int:message_id>/cancel")
@requires_role("operator")
def cancel(message_id: int) -> ResponseReturnValue:
    """Cancel one queued message, with a reason; refused once a worker has claimed it."""
    reason = request.form.get("reason", "").strip()[:500]
    if not reason:
        flash("Not canceled: say why (the reason is kept in the audit log).", "refused")
        return redirect(url_for("messages.detail", message_id=message_id, **scope_args()))
    try:
        with get_db().transaction() as session:
            outcome = cancel_message(
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
    if outcome.canceled:
        flash("Canceled: it will never be sent.", "ok")
    else:
        flash(f"Not canceled: {outcome.why_not}.", "refused")
    return redirect(url_for("messages.detail", message_id=message_id, **scope_args()))
