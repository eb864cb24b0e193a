"""Bulk requeue and bulk cancel (`/bulk/<id>`): preview with an exact count and its
breakdown, confirm, watch the progress live, stop.

1. The dead-letter page (or `/cancel`) posts its filters: the matching ids are stored as
   a plan and the preview page shows the breakdown read back from the plan itself.
2. Confirming ticks groups of that stored plan, never re-runs the filters: what arrives
   after the preview is not touched.
3. The plan is carried out by a campaign-lane job rung here and by the sweeper; the page
   polls its progress until it ends.
"""

from __future__ import annotations

from datetime import timedelta

from flask import abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from sqlalchemy.orm import Session

from app.auth import requires_role, staff, tenant_scope
from app.db import get_db
from app.inputs import parse_id
from app.models_operations import BulkPlan
from app.repo.bulk_aftermath import Aftermath, plan_aftermath
from app.repo.bulkplans import (
    RUNNING,
    PlanNotFoundError,
    PlanRefusedError,
    confirm_plan,
    progress_detail,
    stop_plan,
)
from app.repo.bulkpreviews import (
    Preview,
    QueuedFilters,
    load_preview,
    preview_cancel,
    preview_requeue,
)
from app.repo.campaigns import FIELDS as CAMPAIGN_FIELDS
from app.repo.campaigns import campaign_filter
from app.repo.deadletters import Filters
from app.repo.overview import list_identities
from app.views.pages import is_htmx, now, scope_args, staff_blueprint
from jobs.bulk import ring_plan
from jobs.queues import LANES

bp = staff_blueprint("bulk", __name__)

PERIODS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
CLASSES_FIELD = "class"


def _int(raw: str | None) -> int | None:
    raw = (raw or "").strip()
    return parse_id(raw)


def _readable(session: Session, described: dict[str, str]) -> dict[str, str]:
    """The filters as a person reads them on the plan's page (an identity by its name)."""
    if "identity" in described:
        for label in list_identities(session, tenant_scope()):
            if str(label.id) == described["identity"]:
                described = {**described, "identity": f"{label.provider} …{label.account_id[-4:]}"}
    return described


@bp.post("/dead-letters/bulk-requeue")
@requires_role("operator")
def preview_requeue_view() -> ResponseReturnValue:
    """Store what the dead-letter filters match now as a plan; show its preview."""
    from app.views.dead_letters import CLASSES

    form = request.form
    failure_class = form.get(CLASSES_FIELD, "")
    period = form.get("period", "")
    lane = form.get("lane", "")
    filters = Filters(
        tenant_id=tenant_scope(),
        identity_id=_int(form.get("identity")),
        lane=lane if lane in LANES else None,
        by=campaign_filter(form),
        failure_class=failure_class if failure_class in CLASSES else None,
        code=_int(form.get("code")),
        since=now() - PERIODS[period] if period in PERIODS else None,
    )
    described = {
        key: form.get(key, "")
        for key in ("identity", "lane", CLASSES_FIELD, "code", "period", *CAMPAIGN_FIELDS)
        if form.get(key, "")
    }
    with get_db().transaction() as session:
        described = _readable(session, described)
        preview = preview_requeue(session, filters, described, now(), actor=staff().email)
        plan_id = preview.plan.id
    return redirect(url_for("bulk.show", plan_id=plan_id, **scope_args()))


@bp.get("/cancel")
@requires_role("operator")
def cancel_form() -> ResponseReturnValue:
    """Choose the queued messages to cancel (a campaign sent by mistake)."""
    with get_db().transaction() as session:
        identities = list_identities(session, tenant_scope())
    return render_template(
        "bulk/cancel.html", identities=identities, lanes=LANES, periods=PERIODS, args=request.args
    )


@bp.post("/cancel/preview")
@requires_role("operator")
def preview_cancel_view() -> ResponseReturnValue:
    form = request.form
    lane = form.get("lane", "")
    period = form.get("period", "")
    identity_id = _int(form.get("identity"))
    if identity_id is None:
        flash("Choose the identity whose queued messages to cancel.", "refused")
        return redirect(url_for("bulk.cancel_form", **scope_args()))
    filters = QueuedFilters(
        tenant_id=tenant_scope(),
        identity_id=identity_id,
        lane=lane if lane in LANES else None,
        queued_since=now() - PERIODS[period] if period in PERIODS else None,
        by=campaign_filter(form),
    )
    described = {
        k: form.get(k, "")
        for k in ("identity", "lane", "period", *CAMPAIGN_FIELDS)
        if form.get(k, "")
    }
    with get_db().transaction() as session:
        described = _readable(session, described)
        preview = preview_cancel(session, filters, described, now(), actor=staff().email)
        plan_id = preview.plan.id
    return redirect(url_for("bulk.show", plan_id=plan_id, **scope_args()))


def _preview(plan_id: int) -> Preview:
    try:
        with get_db().transaction() as session:
            return load_preview(session, plan_id, tenant_scope())
    except PlanNotFoundError:
        abort(404)


@bp.get("/bulk/<int:plan_id>")
def show(plan_id: int) -> ResponseReturnValue:
    preview = _preview(plan_id)
    return render_template(
        "bulk/plan.html",
        preview=preview,
        plan=preview.plan,
        progress=progress_detail(preview.plan),
        aftermath=_aftermath(preview.plan),
        now=now(),
    )


def _aftermath(plan: BulkPlan) -> Aftermath | None:
    """A requeue's messages as they are now (None for a cancel or a plan not run yet)."""
    if plan.kind != "requeue" or plan.status == "previewed":
        return None
    with get_db().transaction() as session:
        return plan_aftermath(session, plan.id)


@bp.get("/bulk/<int:plan_id>/progress")
def progress(plan_id: int) -> ResponseReturnValue:
    """The progress widget alone; it polls itself while the plan runs."""
    preview = _preview(plan_id)
    response = render_template(
        "bulk/_progress.html",
        plan=preview.plan,
        progress=progress_detail(preview.plan),
        aftermath=_aftermath(preview.plan),
    )
    return response, 200, {"Vary": "HX-Request"}


@bp.post("/bulk/<int:plan_id>/confirm")
@requires_role("operator")
def confirm(plan_id: int) -> ResponseReturnValue:
    groups = set(request.form.getlist("group"))
    reason = request.form.get("reason", "").strip()[:500] or None
    try:
        with get_db().transaction() as session:
            plan = confirm_plan(
                session, plan_id, tenant_scope(), groups, now(), actor=staff().email, reason=reason
            )
            started, planned, kind = plan.status == RUNNING, plan.planned, plan.kind
    except PlanNotFoundError:
        flash("That preview is gone (previews expire after a day): preview again.", "refused")
        return redirect(url_for("dead_letters.index", **scope_args()))
    except PlanRefusedError as exc:
        flash(f"Not started: {exc}.", "refused")
        return redirect(url_for("bulk.show", plan_id=plan_id, **scope_args()))
    if started:
        rung = ring_plan(plan_id)
        verb = "Requeueing" if kind == "requeue" else "Canceling"
        words = f"{verb} {planned:,} messages."
        if not rung:
            words += " Redis is unreachable: the sweeper carries the plan out instead."
        flash(words, "ok")
    return redirect(url_for("bulk.show", plan_id=plan_id, **scope_args()))


@bp.post("/bulk/<int:plan_id>/stop")
@requires_role("operator")
def stop(plan_id: int) -> ResponseReturnValue:
    try:
        with get_db().transaction() as session:
            plan = stop_plan(session, plan_id, tenant_scope(), now(), actor=staff().email)
            detail = progress_detail(plan)
    except PlanNotFoundError:
        abort(404)
    if not is_htmx():
        flash(f"Stopped: {detail['untouched']:,} of {detail['planned']:,} were not touched.", "ok")
        return redirect(url_for("bulk.show", plan_id=plan_id, **scope_args()))
    return render_template("bulk/_progress.html", plan=plan, progress=detail)
