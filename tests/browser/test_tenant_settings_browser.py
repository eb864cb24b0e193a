"""A platform admin sets a tenant's limits and retention on /tenants in real Chromium; a
message whose content retention purged says so on its page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from app.models import Tenant

from ..jobs.retention_world import purge_all_due
from ..views.dashboard_world import NOW, Tenants, failed_message, make_staff, make_tenants
from .conftest import Served, screenshot
from .dashboard_steps import follow, sign_in

pytestmark = pytest.mark.slow


@pytest.fixture
def tenants(served: Served) -> Tenants:
    world = make_tenants(served.db)
    make_staff(served.db, "root@ratchet.test", "admin", None)
    return world


def test_a_platform_admin_sets_limits_and_a_purged_message_says_so(
    page: Page, served: Served, tenants: Tenants
) -> None:
    failed = failed_message(served.db, tenants.acme, failure_class="permanent")
    sign_in(page, served, "root@ratchet.test")
    follow(page, page.get_by_role("link", name="Tenants"))
    expect(page.get_by_role("heading", name="Tenants")).to_be_visible()
    row = page.locator(f"#tenant-{tenants.acme.tenant_id}")
    row.get_by_label("Requests per second for acme").fill("25")
    row.get_by_label("Messages waiting for acme").fill("5000")
    row.get_by_label("Days acme's content is kept").fill("14")
    row.get_by_role("button", name="Save acme").click()
    expect(page.locator(".flash-ok")).to_contain_text("acme's settings saved")
    with served.db.transaction() as session:
        saved = session.get(Tenant, tenants.acme.tenant_id, populate_existing=True)
        assert saved is not None
        assert (saved.max_requests_per_second, saved.max_waiting, saved.retention_days) == (
            25,
            5000,
            14,
        )
    screenshot(page, "40-tenants-limits-saved")

    purge_all_due(served.db, NOW + timedelta(days=15))
    page.goto(f"{served.url}/messages/{failed}")
    expect(page.get_by_text("content purged on 2026-12-15")).to_be_visible()
    expect(page.locator("#requeue")).to_contain_text("nothing to send again")
    expect(page.get_by_role("button", name="Requeue")).to_have_count(0)
    screenshot(page, "41-message-content-purged")
