"""axe-core on every dashboard page, in real Chromium, at desktop width and at a phone's
(390 px): no violation anywhere. The pages are filled first (a failed message with its raw
answer, a stuck lane and its alert, a worker, a bulk plan, audit rows, a search with several
hits), so axe reads what a support person reads, not empty states.

axe-core is the npm package that `make assets` fetches (scripts/fetch-axe); Playwright
injects it into each page."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect
from rq import SimpleWorker

from jobs.alerts import AlertEvaluator
from jobs.queues import get_queue, get_redis
from jobs.registry import read_live_by_lane

from ..factories import make_message
from ..views.dashboard_world import (
    NOW,
    Tenants,
    failed_message,
    make_staff,
    make_tenants,
    sent_message,
)
from .conftest import Served, axe_violations
from .dashboard_steps import follow, sign_in_on_the_form

pytestmark = pytest.mark.slow

WIDTHS = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
LONG_KEY = "black-friday-2026-order-confirmation-batch-0042-recipient-000000015557654321"


@dataclasses.dataclass
class Filled:
    tenants: Tenants
    failed: int
    sent: int


@pytest.fixture
def filled(served: Served) -> Filled:
    """Every page with something on it: failures of two classes, a sent message, a lane
    stuck with no worker (and its alert firing), a worker on the reply lane."""
    tenants = make_tenants(served.db)
    make_staff(served.db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    make_staff(served.db, "root@ratchet.test", "admin", None)
    failed = failed_message(served.db, tenants.acme, key=LONG_KEY)
    failed_message(
        served.db,
        tenants.acme,
        failure_class="exhausted",
        error={"provider": "whatsapp", "code": 131000, "title": "Something went wrong"},
        had_unknown=True,
        minute=2,
    )
    sent = sent_message(served.db, tenants.acme, "wamid.AXE1", minute=3)
    make_message(served.db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=4))
    redis = get_redis()
    worker = SimpleWorker([get_queue("reply", redis)], connection=redis, name="reply-worker-1")
    worker.register_birth()
    worker.set_state("idle")
    config = dataclasses.replace(served.app.config["RATCHET"], stuck_after=60.0)
    evaluator = AlertEvaluator(served.db, config, workers=lambda: read_live_by_lane(redis))
    evaluator.run(NOW)
    evaluator.close()
    return Filled(tenants, failed, sent)


@pytest.fixture(params=sorted(WIDTHS))
def tab(request: pytest.FixtureRequest, browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=WIDTHS[request.param])
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    yield opened
    context.close()


def check(page: Page, url: str, found: dict[str, list[str]]) -> None:
    page.goto(url)
    expect(page.locator("main h1").first).to_be_visible()
    # Folded parts too (raw answers, error details): axe skips what is hidden.
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    violations = axe_violations(page)
    if violations:
        found[url] = violations


def test_axe_finds_no_violation_on_any_page(tab: Page, served: Served, filled: Filled) -> None:
    found: dict[str, list[str]] = {}
    check(tab, served.url + "/sign-in", found)
    sign_in_on_the_form(tab, served, "admin@acme.test")
    # A bulk plan to look at: the dead letters' "Requeue matching…" makes one.
    tab.goto(served.url + "/dead-letters")
    follow(tab, tab.get_by_role("button", name="Requeue matching…"))
    expect(tab.get_by_role("heading", name=re.compile(r"Bulk requeue #\d+"))).to_be_visible()
    plan = tab.url.split("?")[0]
    identity = filled.tenants.acme.identity_id
    for path in (
        "/",
        "/stuck",
        "/workers",
        "/dead-letters",
        "/dead-letters?dismissed=1",
        "/charts",
        "/identities",
        f"/identities/{identity}/events",
        "/alerts",
        "/audit",
        "/callbacks",
        "/me",
        "/staff",
        "/messages/999999",  # the dashboard's own "not found"
        f"/messages/{filled.failed}",
        f"/messages/{filled.sent}",
        "/search",
        "/search?q=4567",
        "/search?q=nothing-like-this",
        "/cancel",
    ):
        check(tab, served.url + path, found)
    check(tab, plan, found)
    # The platform admin's own pages: every tenant, and the tenants' settings.
    tab.context.clear_cookies()
    sign_in_on_the_form(tab, served, "root@ratchet.test")
    check(tab, served.url + "/", found)
    check(tab, served.url + "/tenants", found)
    assert found == {}, "\n".join(f"{url}:\n  " + "\n  ".join(v) for url, v in found.items())
