"""The audit log (`/audit`): who did what, when, to how many; every role reads it, a
tenant's staff their own tenant's rows only. Filters: actor, action, target, time."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import render_template, request
from flask.typing import ResponseReturnValue

from app.auth import tenant_scope
from app.db import get_db
from app.inputs import parse_id
from app.repo.audit import AuditFilters, audit_actions, audit_page
from app.views.pages import staff_blueprint

bp = staff_blueprint("audit", __name__)

# Detail keys shown as counts ("how many"), in this order.
COUNT_KEYS = (
    "planned",
    "done",
    "skipped",
    "skipped_changed",
    "skipped_held",
    "skipped_already",
    "skipped_claimed",
    "untouched",
)


def parse_time(raw: str | None) -> datetime | None:
    """A `datetime-local` field's value (or an ISO time), read as UTC; None if not one."""
    raw = (raw or "").strip()
    if not raw or len(raw) > 40:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        return None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset: past what a datetime holds
        return None


@bp.get("/audit")
def index() -> ResponseReturnValue:
    args = request.args
    before = args.get("before", "")
    filters = AuditFilters(
        tenant_id=tenant_scope(),
        actor=args.get("actor", "").strip()[:200] or None,
        action=args.get("action", "").strip()[:50] or None,
        target=args.get("target", "").strip()[:100] or None,
        since=parse_time(args.get("since")),
        until=parse_time(args.get("until")),
    )
    with get_db().transaction() as session:
        rows, next_before = audit_page(session, filters, parse_id(before))
        actions = audit_actions(session, filters.tenant_id)
    kept = {k: v for k, v in args.items() if k != "before" and v}
    return render_template(
        "audit/index.html",
        rows=rows,
        actions=actions,
        args=args,
        count_keys=COUNT_KEYS,
        filtered=any(kept.get(k) for k in ("actor", "action", "target", "since", "until")),
        next_args={**kept, "before": next_before} if next_before else None,
        first_args=kept if before else None,
    )
