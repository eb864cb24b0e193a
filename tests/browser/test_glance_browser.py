"""The dashboard at a glance, in real Chromium: polls that keep a person's focus, the
workers a lane needs, and the pages at a phone's width (390 px)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import update

from app.models import Message
from app.repo.identities import pause_identity

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
from .dashboard_steps import follow, sign_in, tab_to

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


PHONE = {"width": 390, "height": 844}
LONG_KEY = "black-friday-2026-order-confirmation-batch-0042-recipient-000000015557654321"


def page_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_at_a_phones_width_the_menu_wraps_long_ids_break_and_raw_boxes_take_focus(
    browser: Browser, served: Served, tenants: Tenants
) -> None:
    message_id = failed_message(served.db, tenants.acme, key=LONG_KEY)
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        sign_in(page, served, "ops@acme.test")
        for path, name in (
            ("/", "37-phone-overview"),
            ("/workers", "38-phone-workers"),
            ("/dead-letters", "39-phone-dead-letters"),
            (f"/messages/{message_id}", "40-phone-message"),
        ):
            page.goto(served.url + path)
            assert page_width(page) <= PHONE["width"], path
            # Every menu link lies inside the dark header (none spilt onto the white page).
            header = page.locator("header.top").bounding_box()
            assert header is not None
            for link in page.locator("header.top nav a").all():
                box = link.bounding_box()
                assert box is not None
                assert box["x"] + box["width"] <= PHONE["width"], (path, link.inner_text())
                assert box["y"] + box["height"] <= header["y"] + header["height"]
            screenshot(page, name)
        # The verbatim answer's scrolling box is reached by the keyboard.
        raw = page.locator("pre.raw").first
        expect(raw).to_have_attribute("tabindex", "0")
        raw.focus()
        assert page.evaluate("document.activeElement.tagName") == "PRE"
        expect(page.get_by_text(LONG_KEY)).to_be_visible()
    finally:
        context.close()


def test_the_charts_page_draws_an_hour_a_person_can_read(
    page: Page, served: Served, tenants: Tenants
) -> None:
    from ..views.chart_traffic import an_hour_of_traffic

    an_hour_of_traffic(served.db, tenants.acme)
    for minute in range(0, 10, 3):  # a little more traffic, and a failure streak
        sent_message(served.db, tenants.acme, f"wamid.more{minute}", minute=minute)
        failed_message(served.db, tenants.acme, minute=minute)
    sign_in(page, served, "ops@acme.test")
    follow(page, page.get_by_role("link", name="Charts", exact=True))
    expect(page.get_by_role("heading", name="Charts", exact=True)).to_be_visible()
    expect(page.get_by_role("img", name=re.compile("Messages per 1 m"))).to_be_visible()
    expect(page.locator("svg.chart")).to_have_count(4)
    expect(page.locator("ul.bars")).to_contain_text("needs_human")
    screenshot(page, "41-charts-hour")
    page.get_by_label("Over the last").select_option("day")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("img", name=re.compile("Messages per 15 m"))).to_be_visible()
    screenshot(page, "42-charts-day")


def test_a_stuck_lane_with_no_worker_is_red_on_the_overview_and_named_in_the_alert(
    page: Page, served: Served, tenants: Tenants
) -> None:
    import dataclasses

    from rq import SimpleWorker

    from jobs.alerts import AlertEvaluator
    from jobs.queues import get_queue, get_redis
    from jobs.registry import read_live_by_lane

    from ..factories import make_message

    redis = get_redis()
    replying = SimpleWorker([get_queue("reply", redis)], connection=redis, name="reply-worker-1")
    replying.register_birth()
    replying.set_state("idle")
    make_message(served.db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=4))
    config = dataclasses.replace(served.app.config["RATCHET"], stuck_after=60.0)
    evaluator = AlertEvaluator(served.db, config, workers=lambda: read_live_by_lane(redis))
    evaluator.run(NOW)
    evaluator.close()
    sign_in(page, served, "ops@acme.test")
    strip = page.locator("ul.lanes li", has_text="campaign")
    expect(strip).to_contain_text("NO WORKER")
    expect(strip).to_have_class(re.compile("lane-unworked"))
    expect(page.locator(".alert-banner")).to_contain_text("no live worker on the campaign lane")
    expect(page.locator(".alert-banner")).to_contain_text("Now:")
    screenshot(page, "43-overview-no-worker")
    follow(page, page.get_by_role("link", name="Workers", exact=True))
    expect(page.locator("#workers-table")).to_contain_text("reply-worker-1")
    screenshot(page, "44-workers")
    follow(page, page.get_by_role("link", name="Identities", exact=True))
    expect(page.locator("#identities-table")).to_contain_text("NOT SENDING")
    screenshot(page, "45-identities-not-sending")


def test_a_dead_letter_is_found_read_and_requeued_by_keyboard_alone(
    page: Page, served: Served, tenants: Tenants
) -> None:
    message_id = failed_message(served.db, tenants.acme)
    sign_in(page, served, "ops@acme.test")
    tab_to(page, "el.textContent.trim() === 'Dead letters' && el.tagName === 'A'")
    follow(page, "Enter")
    expect(page.get_by_role("heading", name="Dead letters")).to_be_visible()
    tab_to(page, "el.tagName === 'SUMMARY'")  # the row's folded details
    page.keyboard.press("Enter")
    tab_to(page, "el.tagName === 'BUTTON' && el.textContent.trim() === 'Requeue'")
    page.keyboard.press("Enter")
    expect(page.locator(f"#dead-letter-{message_id}")).to_contain_text("Requeued: cycle 2")
    screenshot(page, "46-keyboard-requeued")
    # The message's page: its raw answer box is reached by Tab as well.
    page.goto(f"{served.url}/messages/{message_id}")
    tab_to(page, "el.tagName === 'PRE'")


def test_a_message_held_mid_attempt_by_a_paused_identity_reads_held_and_counts_nothing_down(
    page: Page, served: Served, tenants: Tenants
) -> None:
    """Claimed (`sending`, a retry time running), and given back by the attempt that paused
    its identity (`record_held` clears the lease: with a live one a call may be in flight)."""
    message_id = make_message(served.db, tenants.acme, now=NOW - timedelta(minutes=1))
    with served.db.transaction() as session:
        pause_identity(session, tenants.acme.identity_id, "token expired", NOW)
        session.execute(
            update(Message)
            .where(Message.id == message_id)
            .values(
                status="sending",
                sending_at=NOW - timedelta(seconds=30),
                lease_until=None,
                next_attempt_at=NOW + timedelta(seconds=40),
            )
        )
    sign_in(page, served, "ops@acme.test")
    page.goto(f"{served.url}/messages/{message_id}")
    widget = page.locator("#status-widget")
    expect(widget).to_contain_text("held (identity paused)")
    expect(widget).to_contain_text("Nothing is sent until it resumes")
    expect(widget).not_to_contain_text("sending")
    expect(widget).not_to_contain_text("in flight until")
    expect(widget).not_to_contain_text("next attempt")
    expect(page.locator("#ticket-summary")).to_have_value(
        re.compile(r"State: held \(identity paused\), nothing is sent until it resumes")
    )
    screenshot(page, "36-message-held-mid-attempt")
