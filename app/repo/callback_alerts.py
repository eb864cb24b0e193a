"""The alert of status callbacks (docs/alerts.md): a callback endpoint that Ratchet itself
disabled (it answered 410, or a run of its POSTs failed). Its callbacks pile up, kept,
until its tenant enables it again. One reading per endpoint, for the evaluator in
`jobs/alerts.py`; an endpoint its tenant disabled does not fire."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.callback_models import CallbackEndpoint
from app.repo.alert_reading import Reading

KIND = "callbacks_disabled"
# The reasons `app/repo/callback_outbox.py` writes when it disables an endpoint.
BY_RATCHET = ("gone", "failing")


def read_callback_alerts(session: Session, now: datetime) -> list[Reading]:
    del now  # the endpoint row says when it was disabled
    readings = []
    for endpoint in session.scalars(select(CallbackEndpoint).order_by(CallbackEndpoint.id)):
        reason = endpoint.disabled_reason or ""
        firing = not endpoint.enabled and reason.startswith(BY_RATCHET)
        when = endpoint.disabled_at.isoformat() if endpoint.disabled_at else ""
        readings.append(
            Reading(
                alert_key=f"{KIND}:{endpoint.id}",
                kind=KIND,
                tenant_id=endpoint.tenant_id,
                identity_id=None,
                lane=None,
                firing=firing,
                summary=(
                    f"callback endpoint {endpoint.id} ({endpoint.host}) disabled: {reason}; "
                    "its callbacks are kept until it is enabled again"
                    if firing
                    else f"callback endpoint {endpoint.id} ({endpoint.host}) is taking callbacks"
                ),
                figures={"endpoint_id": endpoint.id, "reason": reason, "disabled_at": when},
                anchor=when if firing else "",
            )
        )
    return readings
