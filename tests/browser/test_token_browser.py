"""An expired token, in real Chromium against the sandbox provider: a real RQ worker's send
is refused with Meta's code 190, the identity pauses itself and the paused alert fires with
the reason; an admin reads the banner, stores a new token, resumes the identity, and the
held message goes out. The automatic pause is in the audit log, marked automatic."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from rq import SimpleWorker

from app.clock import utcnow
from jobs.queues import get_queue
from jobs.ringing import ring_identity

from ..factories import World, make_message
from ..sandbox.conftest import SandboxProcess, start_sandbox_process, stop_sandbox_process
from ..views.dashboard_world import make_staff
from .alert_runs import evaluate
from .conftest import Served, axe_violations, screenshot
from .dashboard_steps import follow, sign_in
from .sandbox_identity import make_identity

pytestmark = pytest.mark.slow


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxProcess]:
    process = start_sandbox_process(tmp_path / "sandbox.log")
    yield process
    stop_sandbox_process(process)


def work_campaign_lane(served: Served, world: World) -> None:
    """A real worker drains the campaign lane through the sandbox provider."""
    assert ring_identity(world.identity_id, "campaign", served.app.config["RATCHET"])
    queue = get_queue("campaign")
    SimpleWorker([queue], connection=queue.connection).work(burst=True, with_scheduler=False)


def test_an_expired_token_pauses_the_identity_and_an_admin_replaces_it_and_resumes(
    page: Page, served: Served, sandbox: SandboxProcess
) -> None:
    served.app.extensions["ratchet.clock"] = utcnow  # the worker's and the page's clocks agree
    world = make_identity(served, sandbox, token="expired-token")
    make_staff(served.db, "admin@acme.test", "admin", world.tenant_id)
    message_id = make_message(served.db, world, lane="campaign", now=utcnow())
    work_campaign_lane(served, world)  # Meta answers 401, code 190
    evaluate(served)

    sign_in(page, served, "admin@acme.test")
    banner = page.locator("#alert-banner")
    expect(banner.get_by_role("alert")).to_contain_text("1 alert firing")
    expect(banner).to_contain_text("190")
    screenshot(page, "60-token-banner")
    page.goto(f"{served.url}/messages/{message_id}")
    expect(page.locator("#status-widget")).to_contain_text("held (identity paused)")
    expect(page.locator("#status-widget")).to_contain_text("paused automatically: code 190")
    expect(page.locator("#status-widget .big")).not_to_contain_text("sending")
    expect(page.locator("#status-widget")).not_to_contain_text("in flight until")
    screenshot(page, "61-token-message-held")

    follow(page, page.get_by_role("link", name="Identities", exact=True))
    row = page.locator(f"#identity-{world.identity_id}")
    expect(row).to_contain_text("190")
    expect(row).to_contain_text("by ratchet, automatically")
    expect(row).to_contain_text("then resume")
    expect(row).to_contain_text("nothing sent: paused")
    screenshot(page, "62-token-identity-paused")
    row.get_by_text("Replace token or secret…").click()
    row.get_by_label("new token").fill("good-token")
    row.get_by_role("button", name=re.compile("Store for")).click()
    expect(page.locator(".flash-ok")).to_contain_text("new token stored (not shown again)")
    row = page.locator(f"#identity-{world.identity_id}")
    row.get_by_role("button", name=f"Resume identity {world.identity_id}").click()
    expect(page.locator(".flash-ok")).to_be_visible()
    screenshot(page, "63-token-replaced-resumed")
    assert axe_violations(page) == []

    work_campaign_lane(served, world)
    evaluate(served)
    page.goto(f"{served.url}/messages/{message_id}")
    # Sent, and soon delivered and read: the sandbox's webhooks follow on their own.
    expect(page.locator("#status-widget")).to_contain_text(re.compile(r"sent|delivered|read"))
    expect(banner.get_by_role("alert")).to_have_count(0)
    screenshot(page, "64-token-message-sent")
    follow(page, page.get_by_role("link", name="Audit", exact=True))
    audit = page.locator("main table")
    expect(audit).to_contain_text("token replaced")
    expect(audit.locator("tr", has_text="identity.pause")).to_contain_text("automatic")
    screenshot(page, "65-token-audit")
