"""Each staff member's own time zone: every page shows times in it, UTC on hover."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database

from .dashboard_world import (
    Tenants,
    failed_message,
    make_staff,
    page_token,
    sign_in,
    use_clock,
)

# Each request loads its staff member afresh.
pytestmark = pytest.mark.usefixtures("one_user_per_request")


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    make_staff(db, "view@acme.test", "viewer", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def test_a_staff_member_chooses_their_zone_and_utc_stays_on_hover(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme)
    assert "12:10:00 UTC" in client.get("/").get_data(as_text=True)  # UTC until chosen
    token = page_token(client, "/me")
    saved = client.post("/me/time-zone", data={"csrf_token": token, "time_zone": "Europe/Berlin"})
    assert saved.status_code == 302
    overview = client.get("/").get_data(as_text=True)
    assert "Updated 2026-11-30 13:10:00 CET" in overview
    page = client.get(f"/messages/{message_id}").get_data(as_text=True)
    assert 'title="2026-11-30 13:00:00 CET (2026-11-30 12:00:00 UTC)"' in page
    # Another staff member's pages stay in UTC.
    other = app.test_client()
    sign_in(other, "view@acme.test")
    assert "12:10:00 UTC" in other.get("/").get_data(as_text=True)
    refused = client.post(
        "/me/time-zone",
        data={"csrf_token": token, "time_zone": "Mars/Olympus"},
        follow_redirects=True,
    ).get_data(as_text=True)
    assert "is not a time zone this server knows" in refused
    assert "staff.time_zone" in client.get("/audit").get_data(as_text=True)
