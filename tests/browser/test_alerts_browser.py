"""The alert banner in real Chromium: a lane whose workers are stopped fires the stuck-queue
alert and the banner appears on the open page without a reload; the workers come back (a
real RQ worker sends through the sandbox provider), the alert clears and the banner goes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from rq import SimpleWorker

from app.clock import utcnow
from jobs.queues import get_queue
from jobs.ringing import ring_identity

from ..factories import make_message
from ..sandbox.conftest import SandboxProcess, start_sandbox_process, stop_sandbox_process
from ..views.dashboard_world import PASSWORD, make_staff
from .alert_runs import evaluate
from .conftest import Served, screenshot
from .dashboard_steps import follow
from .sandbox_identity import make_identity

pytestmark = pytest.mark.slow


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxProcess]:
    process = start_sandbox_process(tmp_path / "sandbox.log")
    yield process
    stop_sandbox_process(process)


def test_the_banner_appears_when_the_workers_stop_and_clears_when_they_return(
    page: Page, served: Served, sandbox: SandboxProcess
) -> None:
    served.app.extensions["ratchet.clock"] = utcnow  # the dashboard and the evaluator agree
    world = make_identity(served, sandbox)
    make_staff(served.db, "ops@acme.test", "operator", world.tenant_id)
    # Queued two minutes ago, and no worker has claimed it: the lane's workers are stopped.
    make_message(served.db, world, lane="campaign", now=utcnow() - timedelta(minutes=2))

    page.goto(served.url + "/")
    expect(page).to_have_url(re.compile(r"/sign-in"))
    page.get_by_label("Email").fill("ops@acme.test")
    page.get_by_label("Password").fill(PASSWORD)
    follow(page, page.get_by_role("button", name="Sign in"))
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    banner = page.locator("#alert-banner")
    expect(banner).to_be_attached()
    expect(banner.get_by_role("alert")).to_have_count(0)
    screenshot(page, "alerts-01-no-banner")

    evaluate(served)  # the sweeper's evaluation: the campaign lane is stuck
    # The open page's banner refreshes itself: no reload.
    expect(banner.get_by_role("alert")).to_contain_text("1 alert firing", timeout=12_000)
    expect(banner).to_contain_text("Queue stuck")
    expect(banner).to_contain_text("campaign lane")
    screenshot(page, "alerts-02-banner-firing")

    follow(page, banner.get_by_role("link", name="Open the alerts page"))
    expect(page.get_by_role("heading", name="Alerts", exact=True)).to_be_visible()
    expect(page.locator("#alerts-firing")).to_contain_text("never claimed")
    screenshot(page, "alerts-03-alerts-page")

    # The workers return: a real worker drains the lane through the sandbox provider.
    assert ring_identity(world.identity_id, "campaign", served.app.config["RATCHET"])
    queue = get_queue("campaign")
    SimpleWorker([queue], connection=queue.connection).work(burst=True, with_scheduler=False)
    evaluate(served)
    follow(page, page.get_by_role("link", name="Overview"))
    expect(page.locator("#alert-banner").get_by_role("alert")).to_have_count(0, timeout=12_000)
    screenshot(page, "alerts-04-banner-cleared")
    follow(page, page.get_by_role("link", name="Alerts", exact=True))
    expect(page.locator("#alerts-firing")).to_contain_text("No alert is firing.")
    screenshot(page, "alerts-05-history")
