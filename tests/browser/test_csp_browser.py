"""The dashboard under its Content-Security-Policy in real Chromium: polls still run while
the tab is visible and stop while it is hidden (`data-poll` in static/dashboard.js, now
that htmx may not eval its filter expressions), and an operator's one click shows a
recipient's full number in place. The `page` fixture fails the test on any CSP refusal.

The browser's timers are Playwright's clock, moved by the test: no sleeps."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, Request, expect

from ..views.dashboard_world import failed_message, make_staff, make_tenants
from .conftest import Served, screenshot
from .dashboard_steps import sign_in_on_the_form

pytestmark = pytest.mark.slow

# The tab's visibility, as the page sees it, set by the test.
VISIBILITY = """
Object.defineProperty(Document.prototype, "visibilityState", {
  configurable: true,
  get() { return window.__hidden ? "hidden" : "visible"; },
});
"""


def is_poll(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def test_the_overview_polls_while_visible_and_not_while_hidden(page: Page, served: Served) -> None:
    tenants = make_tenants(served.db)
    make_staff(served.db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    page.add_init_script(VISIBILITY)
    page.clock.install()
    sign_in_on_the_form(page, served, "ops@acme.test")
    phase = ["visible"]
    polls: list[tuple[str, str]] = []
    page.on("request", lambda r: polls.append((phase[0], r.url)) if is_poll(r) else None)

    with page.expect_request(lambda r: is_poll(r) and r.url.rstrip("/") == served.url):
        page.clock.run_for(5_100)  # the overview table's 5 s

    page.evaluate("window.__hidden = true")
    phase[0] = "hidden"
    page.clock.run_for(60_000)  # a minute hidden: every poll timer fires, none asks
    # Visible again, the next tick polls; the browser reports requests in order, so any of
    # the hidden minute is in before it.
    page.evaluate("window.__hidden = false")
    with page.expect_request(lambda r: is_poll(r) and r.url.rstrip("/") == served.url):
        phase[0] = "visible again"
        page.clock.run_for(5_100)
    assert [url for when, url in polls if when == "hidden"] == []
    assert [when for when, _ in polls].count("visible") >= 1


def test_an_operator_shows_a_recipients_full_number_with_one_click(
    page: Page, served: Served
) -> None:
    tenants = make_tenants(served.db)
    make_staff(served.db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    dead = failed_message(served.db, tenants.acme, recipient="15557654321")
    sign_in_on_the_form(page, served, "ops@acme.test")
    page.goto(f"{served.url}/messages/{dead}")
    recipient = page.locator("#recipient")
    expect(recipient).to_contain_text("…4321")
    expect(page.locator("body")).not_to_contain_text("15557654321")
    screenshot(page, "30-message-number-masked")
    recipient.get_by_role("button", name="Show full number").click()
    expect(page.locator("#recipient")).to_have_text("15557654321")
    expect(page.get_by_role("heading", name=f"Message #{dead}")).to_be_visible()
    screenshot(page, "31-message-number-revealed")
