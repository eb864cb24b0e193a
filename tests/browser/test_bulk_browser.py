"""Bulk requeue in real Chromium: filter the dead letters, read the exact count and its
breakdown, tick one more code and watch the button's count follow, confirm, watch the
progress update live without a reload, and find the result in the audit log."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import select

from app.models import Message
from app.repo.bulkrun import run_chunk

from ..views.dashboard_world import NOW, PASSWORD, Tenants, failed_message, make_staff, make_tenants
from .conftest import Served, screenshot
from .dashboard_steps import follow

pytestmark = pytest.mark.slow

EXHAUSTED = {"provider": "whatsapp", "code": 131000, "title": "Something went wrong"}


@pytest.fixture
def tenants(served: Served) -> Tenants:
    world = make_tenants(served.db)
    make_staff(served.db, "ops@acme.test", "operator", world.acme.tenant_id)
    return world


def test_an_operator_bulk_requeues_a_filtered_set_watches_it_and_finds_it_in_the_audit_log(
    page: Page, served: Served, tenants: Tenants
) -> None:
    db = served.db
    exhausted = [
        failed_message(
            db, tenants.acme, failure_class="exhausted", error=EXHAUSTED, had_unknown=True, minute=m
        )
        for m in range(5)
    ]
    templates = [failed_message(db, tenants.acme, minute=m) for m in range(2)]
    held = failed_message(db, tenants.acme, accepted_id="wamid.HELD", minute=3)
    theirs = failed_message(db, tenants.other, failure_class="exhausted", error=EXHAUSTED)

    page.goto(served.url + "/sign-in")
    page.get_by_label("Email").fill("ops@acme.test")
    page.get_by_label("Password").fill(PASSWORD)
    follow(page, page.get_by_role("button", name="Sign in"))
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()

    follow(page, page.get_by_role("link", name="Dead letters", exact=True))
    page.get_by_label("Identity").select_option(str(tenants.acme.identity_id))
    follow(page, page.get_by_role("button", name="Filter"))
    expect(page).to_have_url(re.compile(rf"identity={tenants.acme.identity_id}"))
    screenshot(page, "bulk-00-dead-letters")
    follow(page, page.get_by_role("button", name="Requeue matching…"))

    expect(page.get_by_role("heading", name=re.compile(r"Bulk requeue #\d+"))).to_be_visible()
    expect(page.locator(".lede")).to_contain_text("identity=whatsapp …0001")
    total = page.locator("#preview-total")
    expect(total).to_contain_text("The filters match 8")
    expect(total).to_contain_text("7 can be requeued, 1 the provider may already hold (excluded)")
    exhausted_box = page.get_by_role("checkbox", name=re.compile("exhausted 131000"))
    template_box = page.get_by_role("checkbox", name=re.compile("needs_human 132001"))
    expect(exhausted_box).to_be_checked()
    expect(template_box).not_to_be_checked()
    confirm = page.locator("#confirm-button")
    expect(confirm).to_have_text("Requeue 5")
    expect(page.get_by_role("region", name=re.compile("^Excluded"))).to_contain_text("wamid.HELD")
    screenshot(page, "bulk-01-preview")
    template_box.check()
    expect(confirm).to_have_text("Requeue 7")
    screenshot(page, "bulk-02-ticked")

    # A dead letter that arrives after the preview: the plan must leave it alone.
    newer = failed_message(
        db, tenants.acme, failure_class="exhausted", error=EXHAUSTED, had_unknown=True, minute=9
    )
    confirm.click()
    progress = page.locator("#bulk-progress")
    expect(page.get_by_role("status").first).to_contain_text("Requeueing 7 messages.")
    expect(progress).to_contain_text("Running")
    expect(progress.locator("#bulk-counts")).to_contain_text("0/7")
    screenshot(page, "bulk-03-running")

    # A worker's share: three now, the page's poll shows it without a reload.
    plan_id = int(page.url.rsplit("/", 1)[1].split("?")[0])
    with db.transaction() as session:
        run_chunk(session, plan_id, NOW, limit=3)
    expect(progress.locator("#bulk-counts")).to_contain_text("3/7", timeout=8_000)
    expect(progress.locator("#bulk-counts")).to_contain_text("3 requeued, 0 skipped")
    screenshot(page, "bulk-04-progress")
    with db.transaction() as session:
        while not run_chunk(session, plan_id, NOW, limit=3).finished:
            pass
    expect(progress).to_contain_text("Done", timeout=8_000)
    expect(progress.locator("#bulk-counts")).to_contain_text("7/7: 7 requeued, 0 skipped")
    screenshot(page, "bulk-05-done")

    follow(page, page.get_by_role("link", name="Its rows in the audit log"))
    expect(page.get_by_role("heading", name="Audit log")).to_be_visible()
    done_row = page.locator("tr", has_text="bulk.requeue.done")
    expect(done_row).to_contain_text("ops@acme.test")
    expect(done_row).to_contain_text("planned 7, done 7")
    expect(page.locator("tr", has_text="needs_human:132001")).to_contain_text("bulk.requeue")
    screenshot(page, "bulk-06-audit")

    with db.transaction() as session:
        status = dict(session.execute(select(Message.id, Message.status)).all())
    assert [status[i] for i in exhausted + templates] == ["queued"] * 7
    assert status[held] == "failed" and status[newer] == "failed" and status[theirs] == "failed"


def test_one_click_copies_the_ticket_summary_masked_and_without_the_body(
    page: Page, served: Served, tenants: Tenants
) -> None:
    message_id = failed_message(served.db, tenants.acme, recipient="15557654321")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=served.url)
    page.goto(served.url + "/sign-in")
    page.get_by_label("Email").fill("ops@acme.test")
    page.get_by_label("Password").fill(PASSWORD)
    follow(page, page.get_by_role("button", name="Sign in"))
    page.goto(f"{served.url}/messages/{message_id}")
    page.get_by_role("button", name="Copy ticket summary").click()
    expect(page.locator("#copy-ticket-said")).to_have_text("Copied: recipient masked, no body.")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith(f"Message #{message_id} via whatsapp, to …4321\nState: failed since")
    assert "Provider error: 132001 (class needs_human)" in copied
    assert "Template name does not exist" not in copied
    assert "15557654321" not in copied and "hello" not in copied
    page.locator("details", has_text="What it copies").locator("summary").click()
    screenshot(page, "ticket-01-message-page")


def test_an_operator_cancels_a_campaign_sent_by_mistake_from_the_stuck_page(
    page: Page, served: Served, tenants: Tenants
) -> None:
    from app.repo.claims import claim_message
    from jobs.sweep import sweep_once

    from ..factories import make_message
    from ..views.dashboard_world import LEASE

    ids = [make_message(served.db, tenants.acme, recipient=f"1555000100{n}") for n in range(4)]
    with served.db.transaction() as session:  # a worker got to the first one already
        assert claim_message(session, ids[0], NOW, LEASE) is not None
    page.goto(served.url + "/sign-in")
    page.get_by_label("Email").fill("ops@acme.test")
    page.get_by_label("Password").fill(PASSWORD)
    follow(page, page.get_by_role("button", name="Sign in"))
    follow(page, page.get_by_role("link", name="Stuck", exact=True))
    follow(page, page.get_by_role("link", name="Cancel queued messages…"))
    page.get_by_label("Identity").select_option(str(tenants.acme.identity_id))
    page.get_by_label("Lane").select_option("campaign")
    follow(page, page.get_by_role("button", name="Preview the cancel"))
    # The numbers add up: 4 matched, the 3 the button cancels, the 1 left alone.
    expect(page.locator("#preview-total")).to_have_text(
        "The filters match 4: 3 can be canceled, 1 already claimed by a worker and may be "
        "in flight (left alone)."
    )
    expect(page.locator("#confirm-button")).to_have_text("Cancel 3")
    page.get_by_label("Why cancel them?").fill("campaign sent by mistake")
    screenshot(page, "cancel-01-preview")
    page.locator("#confirm-button").click()
    expect(page.locator("#bulk-progress")).to_contain_text("Running")
    sweep_once(served.db, served.app.config["RATCHET"], NOW)
    expect(page.locator("#bulk-counts")).to_contain_text(
        "3/3: 3 canceled, 0 skipped", timeout=8_000
    )
    screenshot(page, "cancel-02-done")
    with served.db.transaction() as session:
        status = dict(session.execute(select(Message.id, Message.status)).all())
    assert [status[i] for i in ids] == ["sending", "failed", "failed", "failed"]
