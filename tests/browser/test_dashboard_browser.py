"""A support person's morning in real Chromium: sign in, watch a queue turn stuck, read a
dead letter's verbatim error and what to do, requeue it with one click and watch the row
and the overview change without a reload, search by provider id, and, as a viewer, find
no requeue button."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from ..factories import make_message
from ..views.dashboard_world import (
    NOW,
    Tenants,
    failed_message,
    make_staff,
    make_tenants,
    sent_message,
)
from .conftest import Served, screenshot
from .dashboard_steps import follow, sign_in

pytestmark = pytest.mark.slow

TEMPLATE_ERROR = {
    "provider": "whatsapp",
    "http_status": 400,
    "code": 132001,
    "title": "Template name does not exist in the translation",
    "message": "(#132001) Template name does not exist in the translation",
    "details": "template name (order_update) does not exist in en_US",
    "trace_id": "AbC12xYz",
}


@pytest.fixture
def tenants(served: Served) -> Tenants:
    world = make_tenants(served.db)
    make_staff(served.db, "ops@acme.test", "operator", world.acme.tenant_id)
    make_staff(served.db, "view@acme.test", "viewer", world.acme.tenant_id)
    return world


def test_an_operator_signs_in_sees_a_queue_turn_stuck_and_requeues_a_dead_letter_in_place(
    browser: Browser, page: Page, served: Served, tenants: Tenants
) -> None:
    dead = failed_message(served.db, tenants.acme, error=TEMPLATE_ERROR, recipient="15557654321")
    # A message due now, that no worker claims: the lane's workers are stopped.
    make_message(served.db, tenants.acme, lane="campaign", now=NOW - timedelta(seconds=5))
    sign_in(page, served, "ops@acme.test")
    campaign = page.locator("#overview-table tbody tr", has_text="campaign")
    expect(campaign).to_contain_text("OK")
    screenshot(page, "01-overview-ok")

    # Time passes with nobody claiming it: the next poll shows the lane stuck, in red.
    served.clock.now = NOW + timedelta(seconds=90)
    expect(campaign).to_contain_text("STUCK", timeout=12_000)
    expect(campaign).to_have_class(re.compile("health-stuck"))
    expect(campaign).to_contain_text("1 m 35 s")
    screenshot(page, "02-overview-stuck")

    follow(page, page.get_by_role("link", name="Stuck", exact=True))
    expect(page.get_by_role("heading", name="Stuck messages")).to_be_visible()
    expect(page.locator("#stuck-table")).to_contain_text("never claimed")
    screenshot(page, "03-stuck")

    # A second tab keeps the overview open while the dead letter is requeued in the first.
    watcher = page.context.new_page()
    watcher.goto(served.url + "/")
    lane = watcher.locator("#overview-table tbody tr", has_text="campaign")
    expect(lane.locator('td[data-label="Dead letters"]')).to_have_text("1")

    follow(page, page.get_by_role("link", name="Dead letters"))
    row = page.locator(f"#dead-letter-{dead}")
    expect(row).to_contain_text("Template name does not exist in the translation")
    expect(row).to_contain_text("132001")
    expect(row).to_contain_text("Template name or language not found.")
    expect(row).to_contain_text("Fix or replace the template in WhatsApp Manager, then requeue.")
    expect(row).to_contain_text("…4321")
    row.get_by_text("Details, trace id, HTTP").click()
    expect(row).to_contain_text("AbC12xYz")
    screenshot(page, "04-dead-letters")

    url_before = page.url
    row.get_by_role("button", name="Requeue").click()
    expect(row).to_contain_text("Requeued: cycle 2, new provider key.")
    expect(row).to_contain_text("queued")
    assert page.url == url_before  # answered in place, no reload
    screenshot(page, "05-dead-letters-requeued")
    # The overview in the other tab catches up on its own poll.
    expect(lane.locator('td[data-label="Dead letters"]')).to_have_text("0", timeout=12_000)
    watcher.close()

    follow(page, row.get_by_role("link", name=f"#{dead}"))
    expect(page.get_by_role("heading", name=re.compile(f"Message #{dead}"))).to_be_visible()
    expect(page.locator("#status-widget")).to_contain_text("queued")
    expect(page.locator("table.timeline")).to_contain_text("requeued by ops@acme.test")
    screenshot(page, "06-message-detail")


def test_search_by_provider_id_opens_the_message_and_a_failed_one_shows_what_to_do(
    page: Page, served: Served, tenants: Tenants
) -> None:
    wamid = "wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"
    message_id = sent_message(served.db, tenants.acme, wamid)
    failed = failed_message(
        served.db, tenants.acme, error=TEMPLATE_ERROR, accepted_id="wamid.SECONDCOPY"
    )
    sign_in(page, served, "ops@acme.test")
    page.keyboard.press("/")  # the search box takes the focus
    expect(page.get_by_role("searchbox", name="Search messages")).to_be_focused()
    page.keyboard.type(wamid)
    follow(page, "Enter")
    expect(page.get_by_role("heading", name=re.compile(f"Message #{message_id}"))).to_be_visible()
    expect(page.locator("#status-widget")).to_contain_text("sent")
    expect(page.locator("#status-widget")).to_have_attribute("hx-get", re.compile("/status"))
    screenshot(page, "07-message-sent")

    page.goto(f"{served.url}/messages/{failed}")
    expect(page.locator("section.failure")).to_contain_text("Fix or replace the template")
    expect(page.locator("#requeue")).to_contain_text("may already have delivered this message")
    expect(page.get_by_role("button", name="Force requeue: may text twice")).to_be_visible()
    screenshot(page, "08-message-failed-held")


def test_a_viewer_finds_no_requeue_button(page: Page, served: Served, tenants: Tenants) -> None:
    dead = failed_message(served.db, tenants.acme, error=TEMPLATE_ERROR)
    sign_in(page, served, "view@acme.test")
    follow(page, page.get_by_role("link", name="Dead letters"))
    row = page.locator(f"#dead-letter-{dead}")
    expect(row).to_contain_text("Read only: an operator can requeue.")
    expect(row.get_by_role("button")).to_have_count(0)
    page.goto(f"{served.url}/messages/{dead}")
    expect(page.locator("#requeue").get_by_role("button")).to_have_count(0)
    screenshot(page, "09-viewer-message")


def test_the_pages_read_as_cards_on_a_phone(
    browser: Browser, served: Served, tenants: Tenants
) -> None:
    failed_message(served.db, tenants.acme, error=TEMPLATE_ERROR)
    context = browser.new_context(viewport={"width": 390, "height": 844})
    phone = context.new_page()
    phone.set_default_timeout(15_000)
    sign_in(phone, served, "ops@acme.test")
    screenshot(phone, "10-phone-overview")
    phone.goto(served.url + "/dead-letters")
    expect(phone.get_by_role("button", name="Requeue", exact=True)).to_be_visible()
    screenshot(phone, "11-phone-dead-letters")
    context.close()
