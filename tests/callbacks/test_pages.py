"""`/callbacks` is for admins, and only of their own tenant: an operator gets 403, another
tenant's endpoint cannot be replayed or enabled (404), and every action is audited."""

from __future__ import annotations

import re

from flask import Flask
from sqlalchemy import select

from app.callback_models import CallbackEndpoint
from app.db import Database
from app.models import AuditEntry

from ..views.dashboard_world import make_staff, make_tenants, page_token, sign_in, use_clock
from .conftest import add_endpoint, delivered_message
from .receiver import Receiver


def test_an_operator_may_not_open_the_callbacks_page(app: Flask, committed_db: Database) -> None:
    use_clock(app)
    tenants = make_tenants(committed_db)
    make_staff(committed_db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    operator = app.test_client()
    sign_in(operator, "ops@acme.test")
    assert operator.get("/callbacks").status_code == 403


def test_an_admin_sees_and_acts_on_the_endpoints_of_their_own_tenant_only(
    app: Flask, committed_db: Database
) -> None:
    db = committed_db
    use_clock(app)
    tenants = make_tenants(db)
    mine = add_endpoint(db, tenants.acme, Receiver(port=9))
    theirs = add_endpoint(db, tenants.other, Receiver(port=9))
    delivered_message(db, tenants.acme, "wamid.P1")
    make_staff(db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    admin = app.test_client()
    sign_in(admin, "admin@acme.test")
    page = admin.get("/callbacks").get_data(as_text=True)
    assert f"endpoint-{mine}" in page and f"endpoint-{theirs}" not in page
    token = page_token(admin, "/callbacks")
    for path in (f"/callbacks/{theirs}/enable", f"/callbacks/{theirs}/replay-since"):
        data = {"csrf_token": token, "enabled": "0", "since": "2026-11-30T00:00"}
        assert admin.post(path, data=data).status_code == 404
    answer = admin.post(
        f"/callbacks/{mine}/replay-since", data={"csrf_token": token, "since": "2026-11-30T00:00"}
    )
    assert answer.status_code == 302
    refused = admin.post(
        f"/callbacks/{mine}/replay", data={"csrf_token": token, "callback_id": "x"}
    )
    assert refused.status_code == 302
    with db.transaction() as session:
        actions = list(session.scalars(select(AuditEntry.action)))
    assert [a for a in actions if a.startswith("callback")] == ["callback.replay_since"]


def test_an_admin_registers_an_endpoint_sees_its_secret_once_and_rolls_it(
    app: Flask, committed_db: Database
) -> None:
    db = committed_db
    use_clock(app)
    tenants = make_tenants(db)
    make_staff(db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    admin = app.test_client()
    sign_in(admin, "admin@acme.test")
    token = page_token(admin, "/callbacks")
    refused = admin.post("/callbacks", data={"csrf_token": token, "url": "https://10.0.0.1/hook"})
    assert refused.status_code == 400
    assert "not a public address" in refused.get_data(as_text=True)
    made = admin.post(
        "/callbacks",
        data={"csrf_token": token, "url": "http://127.0.0.1:9/hook", "events": "message.read"},
    ).get_data(as_text=True)
    secret = re.search(r'id="shown-secret">(whsec_[^<]+)<', made)
    assert secret, made
    again = admin.get("/callbacks").get_data(as_text=True)
    assert secret.group(1) not in again and "message.read" in again
    with db.transaction() as session:
        (endpoint,) = session.scalars(select(CallbackEndpoint))
    assert endpoint.tenant_id == tenants.acme.tenant_id and endpoint.events == ["message.read"]
    rolled = admin.post(
        f"/callbacks/{endpoint.id}/roll-secret", data={"csrf_token": token}
    ).get_data(as_text=True)
    new = re.search(r'id="shown-secret">(whsec_[^<]+)<', rolled)
    assert new and new.group(1) != secret.group(1)
    with db.transaction() as session:
        actions = list(session.scalars(select(AuditEntry.action)))
    assert [a for a in actions if a.startswith("callback")] == [
        "callback_endpoint.create",
        "callback_endpoint.roll_secret",
    ]
