"""An identity's provider events (`/identities/<id>/events`): Meta's account, template and
quality events for its business account, newest first, each with the verbatim delivery
and what Ratchet did about it; filtered by kind (the subscription field).

An identity is shown only the events whose delivery its own app secret verifies (checked
as the page is read): naming a business account shows no other identity's events. An
event whose delivery retention has emptied can no longer be checked, and is not shown."""

from __future__ import annotations

from flask import render_template, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import NotFound

from app.auth import tenant_scope
from app.crypto import get_box
from app.db import get_db
from app.models import Identity
from app.providers import get_provider
from app.repo.provider_events import (
    EventRow,
    events_of_account,
    fields_of_account,
    visible_identity,
)
from app.views.pages import now, staff_blueprint

bp = staff_blueprint("provider_events", __name__)


@bp.get("/identities/<int:identity_id>/events")
def index(identity_id: int) -> ResponseReturnValue:
    kind = request.args.get("kind", "").strip()[:100] or None
    with get_db().transaction() as session:
        identity = visible_identity(session, identity_id, tenant_scope())
        if identity is None:
            raise NotFound()
        account = identity.business_account_id
        events = events_of_account(session, account, field=kind) if account else []
        events = _verified(identity, events)
        kinds = fields_of_account(session, account) if account else []
        context = {
            "identity": identity,
            "account": account,
            "events": events,
            "kinds": kinds,
            "kind": kind,
            "now": now(),
        }
        return render_template("provider_events/index.html", **context)


def _verified(identity: Identity, events: list[EventRow]) -> list[EventRow]:
    """The events whose delivery the identity's own app secret verifies."""
    if not identity.app_secret_encrypted or not events:
        return []
    secret = get_box().decrypt_remembered(identity.app_secret_encrypted)
    provider = get_provider("whatsapp")
    return [
        event
        for event in events
        if provider.verify_signature(event.body.encode("utf-8"), event.headers, secret)
    ]
