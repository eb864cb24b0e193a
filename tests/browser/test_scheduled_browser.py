"""A scheduled, expiring message's page in a real browser (issue 34): "scheduled for
<time>" while it is queued, and until when it may be sent."""

from __future__ import annotations

from datetime import timedelta

from playwright.sync_api import Page, expect
from sqlalchemy import update

from app.models import Message

from ..factories import make_message, make_world
from ..views.dashboard_world import NOW, PASSWORD, make_staff
from .conftest import Served, screenshot
from .dashboard_steps import follow


def test_a_scheduled_message_page_says_when_it_goes_and_until_when(
    page: Page, served: Served
) -> None:
    world = make_world(served.db)
    make_staff(served.db, "ops@acme.test", "operator", world.tenant_id)
    message_id = make_message(served.db, world, now=NOW)
    send_at = NOW + timedelta(days=2, hours=3)
    with served.db.transaction() as session:
        session.execute(
            update(Message)
            .where(Message.id == message_id)
            .values(not_before=send_at, expires_at=send_at + timedelta(hours=1))
        )
    page.goto(served.url + "/sign-in")
    page.get_by_label("Email").fill("ops@acme.test")
    page.get_by_label("Password").fill(PASSWORD)
    follow(page, page.get_by_role("button", name="Sign in"))
    page.goto(f"{served.url}/messages/{message_id}")
    body = page.locator("body")
    expect(body).to_contain_text(f"scheduled for {send_at.strftime('%Y-%m-%d %H:%M:%S')} UTC")
    until = (send_at + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    expect(body).to_contain_text(f"{until} UTC")
    screenshot(page, "34-message-scheduled")
