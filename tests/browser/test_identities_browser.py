"""Pausing and resuming senders in real Chromium: an operator pauses an identity's campaign
lane, then the whole identity, with a reason, and a second tab on the overview shows each
change on its own poll; the resume puts it back. An admin's staff page, too."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect
from rq import SimpleWorker

from jobs.queues import get_queue, get_redis

from ..factories import make_message
from ..views.dashboard_world import NOW, Tenants, make_staff, make_tenants
from .conftest import Served, screenshot
from .dashboard_steps import follow, sign_in

pytestmark = pytest.mark.slow


@pytest.fixture
def tenants(served: Served) -> Tenants:
    world = make_tenants(served.db)
    make_staff(served.db, "ops@acme.test", "operator", world.acme.tenant_id)
    make_staff(served.db, "admin@acme.test", "admin", world.acme.tenant_id)
    return world


def test_an_operator_pauses_and_resumes_an_identity_and_the_overview_shows_it(
    page: Page, served: Served, tenants: Tenants
) -> None:
    for n in range(3):
        make_message(served.db, tenants.acme, lane="campaign", now=NOW - timedelta(seconds=n))
    make_message(served.db, tenants.acme, lane="reply", now=NOW)
    # The reply lane's worker runs (registered in RQ's registry); the lanes say "sending"
    # only while one does.
    redis = get_redis()
    SimpleWorker([get_queue("reply", redis)], connection=redis, name="reply-1").register_birth()
    sign_in(page, served, "ops@acme.test")

    # A second tab keeps the overview open; it refreshes itself every 5 s.
    watcher = page.context.new_page()
    watcher.goto(served.url + "/")
    campaign = watcher.locator("#overview-table tbody tr", has_text="campaign")
    reply = watcher.locator("#overview-table tbody tr", has_text="reply")
    expect(campaign).to_contain_text("OK")
    expect(reply).to_contain_text("OK")

    follow(page, page.get_by_role("link", name="Identities"))
    expect(page.get_by_role("heading", name="Identities")).to_be_visible()
    row = page.locator(f"#identity-{tenants.acme.identity_id}")
    expect(row).to_contain_text("full speed")
    expect(row).to_contain_text("3 waiting")
    screenshot(page, "20-identities")

    # 1. The campaign lane only, with its reason: replies go on.
    row.get_by_text("Pause…").click()
    row.get_by_label("campaign lane only").check()
    row.get_by_label("Reason").fill("Campaign sent to the wrong list")
    row.get_by_role("button", name=re.compile("Pause identity")).click()
    expect(page.locator(".flash-ok")).to_contain_text(
        "campaign lane paused: holds 3 campaign messages; replies go on."
    )
    row = page.locator(f"#identity-{tenants.acme.identity_id}")
    expect(row.locator('td[data-label="Campaign lane"]')).to_contain_text("PAUSED")
    expect(row.locator('td[data-label="Campaign lane"]')).to_contain_text("by ops@acme.test")
    expect(row.locator('td[data-label="Reply lane"]')).to_contain_text("sending")
    screenshot(page, "21-identities-campaign-paused")
    expect(campaign).to_contain_text("PAUSED", timeout=12_000)
    expect(campaign).to_contain_text("campaign lane paused: Campaign sent to the wrong list")
    expect(reply).to_contain_text("OK")
    screenshot(watcher, "22-overview-campaign-paused")

    # 2. The whole identity.
    row.get_by_text("Pause…").click()
    row.get_by_label("the whole identity").check()
    row.get_by_label("Reason").fill("Meta flagged the number")
    row.get_by_role("button", name=re.compile("Pause identity")).click()
    expect(page.locator(".flash-ok")).to_contain_text("holds 4 messages on both lanes")
    expect(reply).to_contain_text("PAUSED", timeout=12_000)
    expect(reply).to_contain_text("Meta flagged the number")
    screenshot(watcher, "23-overview-identity-paused")

    # 3. Resume both; the overview goes back to OK.
    row = page.locator(f"#identity-{tenants.acme.identity_id}")
    row.get_by_role("button", name=re.compile("Resume identity")).click()
    expect(page.locator(".flash-ok")).to_contain_text("resumed: 4 due now.")
    row = page.locator(f"#identity-{tenants.acme.identity_id}")
    row.get_by_role("button", name=re.compile("Resume campaign lane")).click()
    expect(page.locator(".flash-ok")).to_contain_text("campaign lane resumed: 3 due now.")
    expect(page.locator(f"#identity-{tenants.acme.identity_id}")).not_to_contain_text("PAUSED")
    screenshot(page, "24-identities-resumed")
    expect(reply).to_contain_text("OK", timeout=12_000)
    expect(campaign).to_contain_text("OK", timeout=12_000)
    screenshot(watcher, "25-overview-resumed")
    watcher.close()


def test_an_admin_replaces_a_token_and_adds_a_staff_login(
    page: Page, served: Served, tenants: Tenants
) -> None:
    sign_in(page, served, "admin@acme.test")
    follow(page, page.get_by_role("link", name="Identities"))
    row = page.locator(f"#identity-{tenants.acme.identity_id}")
    # A token pasted with a zero-width space is refused, and not echoed back.
    row.get_by_text("Replace token or secret…").click()
    row.get_by_label("new token").fill("EAAG-pasted\u200b-token")
    row.get_by_role("button", name=re.compile("Store for")).click()
    expect(page.locator(".flash-refused")).to_contain_text("no HTTP header can carry")
    expect(page.locator("body")).not_to_contain_text("EAAG-pasted")
    screenshot(page, "26-identities-token-refused")
    row = page.locator(f"#identity-{tenants.acme.identity_id}")
    row.get_by_text("Replace token or secret…").click()
    row.get_by_label("new token").fill("EAAG-brand-new-token")
    row.get_by_role("button", name=re.compile("Store for")).click()
    expect(page.locator(".flash-ok")).to_contain_text("new token stored (not shown again)")
    expect(page.locator("body")).not_to_contain_text("EAAG-brand-new-token")
    screenshot(page, "26-identities-token-replaced")

    follow(page, page.get_by_role("link", name="Staff"))
    expect(page.get_by_role("heading", name="Staff")).to_be_visible()
    page.get_by_text("Add a staff login…").click()
    page.get_by_label("Email", exact=True).fill("night.shift@acme.test")
    page.get_by_label("Role", exact=True).select_option("operator")
    page.get_by_role("button", name="Create login").click()
    expect(page.locator(".flash-ok")).to_contain_text("night.shift@acme.test created as operator")
    expect(page.locator("#shown-password")).to_be_visible()
    screenshot(page, "27-staff-created")
