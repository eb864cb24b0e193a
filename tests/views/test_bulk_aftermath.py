"""After a bulk requeue: its page follows what became of the messages it requeued, and
the audit log shows a platform operator's plan across tenants once to platform staff."""

from __future__ import annotations

import pytest
from flask import Flask

from app.db import Database
from app.models import Message

from .bulk_requeue import confirm, exhausted, preview, work_one_campaign_job
from .dashboard_world import HTMX, NOW, Tenants, client_for

pytestmark = pytest.mark.usefixtures("one_user_per_request")


def test_the_plan_page_follows_the_requeued_until_none_waits(
    app: Flask, db: Database, tenants: Tenants, redis_url: str
) -> None:
    operator = client_for(app, db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    ours = [exhausted(db, tenants.acme, m) for m in range(3)]
    plan_id, _ = preview(operator)
    confirm(operator, plan_id, ["exhausted:131000"])
    work_one_campaign_job(redis_url)
    progress = operator.get(f"/bulk/{plan_id}/progress", headers=HTMX).get_data(as_text=True)
    assert "0 sent or delivered, 3 still waiting,\n    0 failed again" in progress
    assert 'hx-trigger="every 5s' in progress
    with db.transaction() as session:  # all three fail again (what the issue saw happen)
        for message_id in ours:
            row = session.get(Message, message_id)
            assert row is not None
            row.status, row.failed_at = "failed", NOW
    progress = operator.get(f"/bulk/{plan_id}/progress", headers=HTMX).get_data(as_text=True)
    assert "3 failed again" in progress and "dead letters</a>" in progress
    assert "hx-trigger" not in progress  # nothing waits: it stops following


def test_a_platform_plan_across_tenants_is_one_audit_row_for_platform_staff(
    app: Flask, db: Database, tenants: Tenants, redis_url: str
) -> None:
    exhausted(db, tenants.acme)
    exhausted(db, tenants.other)
    platform = client_for(app, db, "root@platform.test", "operator", None)
    plan_id, page = preview(platform)
    assert "The filters match 2" in page
    confirm(platform, plan_id, ["exhausted:131000"])
    work_one_campaign_job(redis_url)
    rows = platform.get("/audit?action=bulk.requeue").get_data(as_text=True)
    assert rows.count('<td data-label="Action">bulk.requeue.done') == 1
    assert (
        rows.count('<td data-label="Action">bulk.requeue\n')
        + rows.count('<td data-label="Action">bulk.requeue<')
        == 1
    )
    acme = client_for(app, db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    theirs = acme.get("/audit?action=bulk.requeue").get_data(as_text=True)
    assert theirs.count('<td data-label="Action">bulk.requeue.done') == 1  # their share
