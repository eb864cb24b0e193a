"""Incident tasks a support person meets, walked in real Chromium with screenshots: a
customer's missing message (keyboard only), a failed template campaign, and a dismissal
with its reason and its undo. The stuck lane with no worker, phone width and the keyboard
requeue are in test_glance_browser, the expired token in test_token_browser, the cancel of a
campaign in test_bulk_browser."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from app.repo.bulkrun import run_chunk

from ..views.dashboard_world import (
    NOW,
    Tenants,
    failed_message,
    make_staff,
    make_tenants,
    sent_message,
)
from .conftest import Served, axe_violations, screenshot
from .dashboard_steps import follow, sign_in, tab_to

pytestmark = pytest.mark.slow

TEMPLATE_ERROR = {
    "provider": "whatsapp",
    "http_status": 400,
    "code": 132001,
    "title": "Template name does not exist in the translation",
    "details": "template name (order_update) does not exist in pt_BR",
}
ORDER_UPDATE = {"name": "order_update", "language": "pt_BR"}


@pytest.fixture
def tenants(served: Served) -> Tenants:
    world = make_tenants(served.db)
    make_staff(served.db, "ops@acme.test", "operator", world.acme.tenant_id)
    return world


def test_a_customers_missing_message_is_found_by_their_numbers_last_digits_by_keyboard_alone(
    page: Page, served: Served, tenants: Tenants
) -> None:
    # Two customers whose numbers end alike; the one who called failed, the other was sent.
    sent_message(served.db, tenants.acme, "wamid.OTHER", minute=1)  # ...1234567
    theirs = failed_message(
        served.db, tenants.acme, error=TEMPLATE_ERROR, recipient="5511987654567", minute=4
    )
    sign_in(page, served, "ops@acme.test")
    page.keyboard.press("/")
    expect(page.get_by_role("searchbox", name="Search messages")).to_be_focused()
    page.keyboard.type("4567")
    follow(page, "Enter")
    # Several numbers end in 4567: a choice, not a guess.
    expect(page.get_by_role("heading", name="Search")).to_be_visible()
    results = page.get_by_role("region", name="Search results")
    expect(results.locator("tbody tr")).to_have_count(2)
    expect(results).to_contain_text("…4567")
    screenshot(page, "50-missing-search-choice")
    tab_to(page, f"el.tagName === 'A' && el.textContent.trim() === '#{theirs}'")
    follow(page, "Enter")
    expect(page.get_by_role("heading", name=re.compile(f"Message #{theirs}"))).to_be_visible()
    expect(page.locator("#status-widget")).to_contain_text("failed")
    expect(page.locator("section.failure")).to_contain_text("132001")
    expect(page.locator("section.failure")).to_contain_text("Fix or replace the template")
    expect(page.locator("body")).not_to_contain_text("5511987654567")  # masked
    screenshot(page, "51-missing-message-page")
    # The raw answer is read by keyboard as well.
    tab_to(page, "el.tagName === 'PRE'")
    assert page.evaluate("document.activeElement.getAttribute('aria-label')").startswith(
        "Attempt 1"
    )
    assert axe_violations(page) == []


def test_a_failed_template_campaign_is_filtered_by_its_label_and_requeued_alone(
    page: Page, served: Served, tenants: Tenants
) -> None:
    db, acme = served.db, tenants.acme
    for minute in range(3):
        failed_message(
            db,
            acme,
            error=TEMPLATE_ERROR,
            campaign="black-friday",
            template=ORDER_UPDATE,
            minute=minute,
        )
    other = failed_message(db, acme, error=TEMPLATE_ERROR, campaign="welcome", minute=5)
    sign_in(page, served, "ops@acme.test")
    follow(page, page.get_by_role("link", name="Dead letters", exact=True))
    expect(page.locator("table.dead-letters tbody tr")).to_have_count(4)
    page.get_by_label("Campaign label").fill("black-friday")
    follow(page, page.get_by_role("button", name="Filter"))
    expect(page).to_have_url(re.compile(r"campaign=black-friday"))
    rows = page.locator("table.dead-letters tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("order_update")
    expect(rows.first).to_contain_text("pt_BR")
    expect(rows.first).to_contain_text("Fix or replace the template in WhatsApp Manager")
    expect(page.locator(f"#dead-letter-{other}")).to_have_count(0)
    screenshot(page, "52-campaign-dead-letters")

    # The template fixed in WhatsApp Manager: requeue this campaign's failures, no other.
    follow(page, page.get_by_role("button", name="Requeue matching…"))
    expect(page.get_by_role("heading", name=re.compile(r"Bulk requeue #\d+"))).to_be_visible()
    expect(page.locator(".lede")).to_contain_text("black-friday")
    expect(page.locator("#preview-total")).to_contain_text("The filters match 3")
    page.get_by_role("checkbox", name=re.compile("needs_human 132001")).check()
    confirm = page.locator("#confirm-button")
    expect(confirm).to_have_text("Requeue 3")
    screenshot(page, "53-campaign-preview")
    confirm.click()
    progress = page.locator("#bulk-progress")
    expect(progress).to_contain_text("Running")
    # The bulk worker's part, run here in-process.
    plan_id = int(page.url.rsplit("/", 1)[1].split("?")[0])
    with db.transaction() as session:
        while not run_chunk(session, plan_id, NOW, limit=2).finished:
            pass
    expect(progress).to_contain_text("Done", timeout=8_000)
    expect(progress.locator("#bulk-counts")).to_contain_text("3/3: 3 requeued, 0 skipped")
    screenshot(page, "54-campaign-requeued")
    follow(page, page.get_by_role("link", name="Dead letters", exact=True))
    expect(page.locator("table.dead-letters tbody tr")).to_have_count(1)
    expect(page.locator(f"#dead-letter-{other}")).to_contain_text("welcome")


def test_a_dead_letter_is_dismissed_with_a_reason_found_again_and_the_dismissal_undone(
    page: Page, served: Served, tenants: Tenants
) -> None:
    dead = failed_message(served.db, tenants.acme, error=TEMPLATE_ERROR)
    sign_in(page, served, "ops@acme.test")
    follow(page, page.get_by_role("link", name="Dead letters", exact=True))
    row = page.locator(f"#dead-letter-{dead}")
    row.get_by_label(f"Why dismiss #{dead}").fill("customer unsubscribed, ticket 4411")
    row.get_by_role("button", name="Dismiss").click()
    expect(row).to_contain_text("Dismissed")
    screenshot(page, "55-dismissed-in-place")
    page.reload()
    expect(page.locator(f"#dead-letter-{dead}")).to_have_count(0)
    expect(page.locator("main")).to_contain_text("No dead letters")

    page.get_by_label("dismissed or canceled instead").check()
    follow(page, page.get_by_role("button", name="Filter"))
    row = page.locator(f"#dead-letter-{dead}")
    expect(row).to_contain_text("Dismissed: off the actionable list.")
    screenshot(page, "56-dismissed-list")
    follow(page, page.get_by_role("link", name="Audit", exact=True))
    expect(page.locator("main")).to_contain_text("customer unsubscribed, ticket 4411")
    screenshot(page, "57-dismissal-audited")

    page.goto(f"{served.url}/dead-letters?dismissed=1")
    page.locator(f"#dead-letter-{dead}").get_by_role("button", name="Undo the dismissal").click()
    page.goto(f"{served.url}/dead-letters")
    expect(page.locator(f"#dead-letter-{dead}")).to_contain_text("132001")
    screenshot(page, "58-dismissal-undone")
