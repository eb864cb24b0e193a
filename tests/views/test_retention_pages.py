"""A purged message says so: its page ("content purged on <date>") and the API's
`content_purged_at`; the facts still show."""

from __future__ import annotations

from datetime import timedelta

from flask import Flask

from app.db import Database

from ..conftest import T0
from ..jobs.retention_world import purge_all_due
from .dashboard_world import failed_message, make_staff, make_tenants, use_clock
from .staff_sessions import as_, signed_in

PURGED_AT = T0 + timedelta(days=31)


def test_the_message_page_and_the_api_say_when_its_content_was_purged(
    app: Flask, db: Database
) -> None:
    tenants = make_tenants(db)
    failed = failed_message(db, tenants.acme, failure_class="permanent")
    use_clock(app, PURGED_AT)
    make_staff(db, "viewer@acme.test", "viewer", tenants.acme.tenant_id)
    client = signed_in(app, "viewer@acme.test")
    as_(client)
    before = client.get(f"/messages/{failed}").get_data(as_text=True)
    assert "content purged" not in before and "characters (hidden)" in before

    purge_all_due(db, PURGED_AT)

    as_(client)
    page = client.get(f"/messages/{failed}").get_data(as_text=True)
    assert "content purged on 2026-12-31" in page
    assert "132001" in page and "permanent" in page  # the code and the class stay
    answer = app.test_client().get(
        f"/v1/messages/{failed}", headers={"Authorization": f"Bearer {tenants.acme.api_key}"}
    )
    assert answer.get_json()["content_purged_at"] == "2026-12-31T12:00:00Z"
