"""The dead-letter list and search results refresh themselves in real Chromium, like the
other polled pages: a colleague's dismissal and requeue show in place, keyboard focus stays
on the element a person was on, and no new row slips in above it (the badge offers it).

The browser's timers are Playwright's clock, moved by the test: no sleeps."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from app.repo.cancels import dismiss_message
from app.repo.requeues import requeue_from_dashboard

from ..views.dashboard_world import NOW, Tenants, failed_message, make_staff, make_tenants
from .conftest import Served, axe_violations, screenshot
from .dashboard_steps import follow, sign_in

pytestmark = pytest.mark.slow


@pytest.fixture
def tenants(served: Served) -> Tenants:
    world = make_tenants(served.db)
    make_staff(served.db, "ops@acme.test", "operator", world.acme.tenant_id)
    return world


def mark_focus(page: Page) -> None:
    # A mark on the focused element itself: a poll that replaced it would leave a new node.
    page.evaluate("document.activeElement.ratchetProbe = true")


def focus_kept(page: Page) -> bool:
    return bool(page.evaluate("document.activeElement.ratchetProbe === true"))


def test_the_dead_letter_rows_refresh_in_place_keeping_focus_and_adding_no_row(
    page: Page, served: Served, tenants: Tenants
) -> None:
    db = served.db
    first = failed_message(db, tenants.acme, minute=1)
    second = failed_message(db, tenants.acme, minute=2)
    page.clock.install()
    sign_in(page, served, "ops@acme.test")
    follow(page, page.get_by_role("link", name="Dead letters", exact=True))
    rows = page.locator("#dead-letters-list tbody tr")
    expect(rows).to_have_count(2)
    page.locator(f"#dead-letter-{first}").get_by_role("link", name=f"#{first}").focus()
    mark_focus(page)

    # Meanwhile a colleague dismisses the second, and a new dead letter arrives.
    with db.transaction() as session:
        dismiss_message(
            session,
            second,
            NOW,
            actor="colleague@acme.test",
            reason="duplicate order",
            tenant_id=None,
            expected_cycle=1,
        )
    newer = failed_message(db, tenants.acme, minute=11)  # after the page loaded (12:10)
    page.clock.run_for(15_100)  # the list's 15 s and the badge's
    expect(page.locator(f"#dead-letter-{second}")).to_contain_text(
        "Dismissed: off the actionable list."
    )
    expect(rows).to_have_count(2)
    expect(page.locator(f"#dead-letter-{newer}")).to_have_count(0)
    expect(page.locator("#dead-letters-new")).to_contain_text("1 new")
    assert focus_kept(page)
    screenshot(page, "70-dead-letters-refreshed")

    # And the one in focus is requeued elsewhere: it says so where it stands.
    with db.transaction() as session:
        assert requeue_from_dashboard(
            session, first, None, 1, NOW, actor="colleague@acme.test"
        ).requeued
    page.clock.run_for(15_100)
    expect(page.locator(f"#dead-letter-{first}")).to_contain_text("No longer a dead letter.")
    expect(page.locator(f"#dead-letter-{first}")).to_contain_text("queued")
    screenshot(page, "71-dead-letters-requeued-elsewhere")
    assert axe_violations(page) == []


def test_search_results_refresh_their_states_keeping_focus(
    page: Page, served: Served, tenants: Tenants
) -> None:
    db = served.db
    first = failed_message(db, tenants.acme, minute=1)
    second = failed_message(db, tenants.acme, minute=2)
    page.clock.install()
    sign_in(page, served, "ops@acme.test")
    page.goto(f"{served.url}/search?q=4567")
    hit = page.locator(f"#hit-{first}")
    expect(hit).to_contain_text("failed")
    hit.get_by_role("link", name=f"#{first}").focus()
    mark_focus(page)
    with db.transaction() as session:
        assert requeue_from_dashboard(
            session, first, None, 1, NOW, actor="colleague@acme.test"
        ).requeued
    page.clock.run_for(15_100)
    expect(hit).to_contain_text("queued")
    expect(page.locator(f"#hit-{second}")).to_contain_text("failed")
    assert focus_kept(page)
    screenshot(page, "72-search-refreshed")


def test_a_requeue_on_the_page_stays_confirmed_after_the_refresh_and_a_dismissal_offers_undo(
    page: Page, served: Served, tenants: Tenants
) -> None:
    db = served.db
    requeued = failed_message(db, tenants.acme, minute=1)
    dismissed = failed_message(db, tenants.acme, minute=2)
    page.clock.install()
    sign_in(page, served, "ops@acme.test")
    follow(page, page.get_by_role("link", name="Dead letters", exact=True))
    row = page.locator(f"#dead-letter-{requeued}")
    row.get_by_role("button", name="Requeue", exact=True).click()
    expect(row).to_contain_text("Requeued: cycle 2, new provider key.")
    other = page.locator(f"#dead-letter-{dismissed}")
    other.get_by_label(f"Why dismiss #{dismissed}").fill("customer told by phone")
    other.get_by_role("button", name="Dismiss").click()
    expect(other).to_contain_text("Dismissed: off the list")

    page.clock.run_for(15_100)  # the list's refresh
    expect(row.get_by_role("status")).to_contain_text(
        "by ops@acme.test: cycle 2, new provider key."
    )
    expect(row).to_contain_text("No longer a dead letter.")
    expect(other.get_by_role("button", name="Undo the dismissal")).to_have_class("primary")
    expect(other.get_by_role("button", name="Requeue", exact=True)).to_be_hidden()
    screenshot(page, "36-dead-letters-requeue-kept-after-refresh")
    other.get_by_text("Requeue it instead").click()
    expect(other.get_by_role("button", name="Requeue", exact=True)).to_be_visible()
    expect(other.get_by_role("button", name="Requeue", exact=True)).not_to_have_class("primary")
    assert axe_violations(page) == []
