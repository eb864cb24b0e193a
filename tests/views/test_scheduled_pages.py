"""A scheduled message on its dashboard page ("scheduled for <time>", and its validity),
and canceled through the API while it waits (issue 34)."""

from __future__ import annotations

from datetime import timedelta

from flask import Flask

from app.clock import utcnow
from app.db import Database

from .dashboard_world import make_staff, make_tenants
from .staff_sessions import as_, signed_in


def test_a_scheduled_message_says_when_on_its_page_and_can_be_canceled_until_then(
    app: Flask, db: Database
) -> None:
    tenants = make_tenants(db)
    api = app.test_client()
    auth = {"Authorization": f"Bearer {tenants.acme.api_key}"}
    send_at = (utcnow() + timedelta(days=3)).replace(microsecond=0)
    created = api.post(
        "/v1/messages",
        json={
            "identity_id": tenants.acme.identity_id,
            "to": "15551234567",
            "text": "see you friday",
            "send_at": send_at.isoformat(),
            "valid_for": 3600,
        },
        headers=auth,
    )
    assert created.status_code == 201, created.get_json()
    message_id = created.get_json()["id"]
    make_staff(db, "viewer@acme.test", "viewer", tenants.acme.tenant_id)
    client = signed_in(app, "viewer@acme.test")
    as_(client)
    page = client.get(f"/messages/{message_id}").get_data(as_text=True)
    assert f"scheduled for {send_at.strftime('%Y-%m-%d %H:%M:%S')} UTC" in page
    until = (send_at + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    assert f"{until} UTC" in page

    canceled = api.post(f"/v1/messages/{message_id}/cancel", headers=auth)
    assert canceled.status_code == 200, canceled.get_json()
    assert canceled.get_json()["failure_class"] == "canceled"
    as_(client)
    after = client.get(f"/messages/{message_id}").get_data(as_text=True)
    assert 'class="scheduled"' not in after and "was scheduled for" in after
