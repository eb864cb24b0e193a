"""Status callbacks in real Chromium: an admin sees an endpoint Ratchet disabled after its
receiver answered 500 then 410, with each POST's status, latency and the receiver's answer
escaped; enables it, replays one callback, and reads the message's callbacks on its page."""

from __future__ import annotations

import dataclasses

import pytest
from playwright.sync_api import Page, expect

from jobs.callbacks import deliver_due

from ..callbacks.conftest import BOX, add_endpoint, at, delivered_message, outbox
from ..callbacks.receiver import Receiver
from ..views.dashboard_world import make_staff, make_tenants
from .conftest import Served, axe_violations, screenshot
from .dashboard_steps import follow, sign_in

pytestmark = pytest.mark.slow


def test_an_admin_sees_why_an_endpoint_stopped_enables_it_and_replays_a_callback(
    page: Page, served: Served
) -> None:
    world = make_tenants(served.db)
    make_staff(served.db, "admin@acme.test", "admin", world.acme.tenant_id)
    receiver = Receiver(script=[500, 410]).start()
    try:
        endpoint_id = add_endpoint(served.db, world.acme, receiver)
        message_id = delivered_message(served.db, world.acme, "wamid.B1")
        config = dataclasses.replace(
            served.app.config["RATCHET"], callback_allow_hosts=("127.0.0.1",)
        )
        deliver_due(served.db, BOX, config, endpoint_id, lambda: at(10))
        first = outbox(served.db)[0]
        deliver_due(served.db, BOX, config, endpoint_id, lambda: first.next_attempt_at)

        sign_in(page, served, "admin@acme.test")
        follow(page, page.get_by_role("link", name="Callbacks"))
        section = page.locator(f"#endpoint-{endpoint_id}")
        expect(section).to_contain_text("disabled")
        expect(section).to_contain_text("gone: the receiver answered 410")
        expect(section).to_contain_text("3 pending")
        rows = section.locator("tbody tr")
        expect(rows).to_have_count(2)
        expect(rows.nth(0)).to_contain_text("410")
        expect(rows.nth(1)).to_contain_text("500")
        # The receiver's words are shown as text, never as markup.
        expect(rows.nth(1)).to_contain_text('"note": "<b>escaped?</b>"')
        expect(section.locator("pre b")).to_have_count(0)
        screenshot(page, "40-callbacks-endpoint-disabled")
        assert axe_violations(page) == []  # the receivers' answers in their boxes included

        section.get_by_role("button", name=f"Enable endpoint {endpoint_id}").click()
        expect(page.locator(".flash-ok")).to_contain_text("what piled up goes out in order")
        section = page.locator(f"#endpoint-{endpoint_id}")
        expect(section).to_contain_text("enabled")
        deliver_due(served.db, BOX, config, endpoint_id, lambda: at(600))
        page.reload()
        expect(section).to_contain_text("0 pending")
        section.get_by_label("Replay callback").fill(f"cb_{first.id}")
        section.get_by_role("button", name="Replay", exact=True).click()
        expect(page.locator(".flash-ok")).to_contain_text(f"cb_{first.id} will be posted again")
        screenshot(page, "41-callbacks-enabled-replayed")

        page.goto(f"{served.url}/messages/{message_id}")
        callbacks = page.locator("section", has=page.locator("#callbacks-h"))
        expect(callbacks.locator("tbody tr")).to_have_count(3)
        expect(callbacks).to_contain_text("message.read")
        expect(callbacks.locator("tbody tr").nth(0)).to_contain_text("pending")  # replayed
        screenshot(page, "42-message-callbacks")
        assert axe_violations(page) == []
    finally:
        receiver.stop()
