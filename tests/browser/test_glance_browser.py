"""The dashboard at a glance, in real Chromium: polls that keep a person's focus, the
workers a lane needs, and the pages at a phone's width (390 px)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from ..views.dashboard_world import NOW, Tenants, failed_message, make_staff, make_tenants
from .conftest import Served, screenshot
from .test_dashboard_browser import sign_in

pytestmark = pytest.mark.slow


@pytest.fixture
def tenants(served: Served) -> Tenants:
    world = make_tenants(served.db)
    make_staff(served.db, "ops@acme.test", "operator", world.acme.tenant_id)
    return world


def test_the_overview_poll_keeps_keyboard_focus_where_it_was(
    page: Page, served: Served, tenants: Tenants
) -> None:
    failed_message(served.db, tenants.acme)
    sign_in(page, served, "ops@acme.test")
    link = page.locator("#overview-table td[data-label='Dead letters'] a").first
    link.focus()
    # A mark on the element itself: a poll that replaced it would leave a new node unmarked.
    page.evaluate("document.activeElement.ratchetProbe = true")
    served.clock.now = NOW + timedelta(seconds=7)
    expect(page.locator("#overview-table .updated")).to_contain_text(
        "2026-11-30 12:10:07", timeout=12_000
    )
    assert page.evaluate("document.activeElement.ratchetProbe === true")
    assert page.evaluate("document.activeElement.closest('#overview-table') !== null")
    screenshot(page, "36-overview-focus-kept")
