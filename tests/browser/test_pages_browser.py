"""A Messenger dead letter in real Chromium: a support person reads that the customer's
window closed (Meta's code 10 with subcode 2018278), not that a permission is missing,
and what to do about it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from ..factories import make_world
from ..views.dashboard_world import PASSWORD, failed_message, make_staff
from .conftest import Served, screenshot
from .dashboard_steps import follow

pytestmark = pytest.mark.slow

WINDOW_CLOSED = {
    "provider": "messenger",
    "http_status": 400,
    "code": 10,
    "subcode": 2018278,
    "title": None,
    "message": "(#10) This message is sent outside of allowed window.",
    "trace_id": "BLBz/WZt8dN",
}


def test_a_messenger_window_closed_dead_letter_says_so_and_what_to_do(
    page: Page, served: Served
) -> None:
    world = make_world(served.db, provider="messenger", account_id="1067280970047460")
    make_staff(served.db, "ops@acme.test", "operator", world.tenant_id)
    dead = failed_message(
        served.db,
        world,
        failure_class="permanent",
        error=WINDOW_CLOSED,
        recipient="1254477777772919",
    )
    page.goto(served.url + "/sign-in")
    page.get_by_label("Email").fill("ops@acme.test")
    page.get_by_label("Password").fill(PASSWORD)
    follow(page, page.get_by_role("button", name="Sign in"))
    page.goto(f"{served.url}/dead-letters")
    row = page.locator("tr", has_text=f"#{dead}")
    expect(row).to_contain_text("messaging window")
    screenshot(page, "20-dead-letters-messenger-window")
    page.goto(f"{served.url}/messages/{dead}")
    failure = page.locator("section.failure")
    expect(failure).to_contain_text("outside the messaging window")
    expect(failure).to_contain_text("HUMAN_AGENT")
    expect(failure).not_to_contain_text("permission")
    expect(page.locator("body")).to_contain_text("2919")  # the PSID, masked as numbers are
    screenshot(page, "21-message-messenger-window")
