"""The dashboard in a real browser: Debian's Chromium driven by Playwright, against the real
app served over HTTP from a thread, on committed PostgreSQL.

The dashboard's clock is passed in (`Served.clock`) and moved by the tests, so a queue
turns stuck because its time passes, not because a test sleeps."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from flask import Flask
from playwright.sync_api import Browser, Page, sync_playwright
from werkzeug.serving import make_server

from app.db import Database

from ..conftest import POLL, make_app
from ..views.dashboard_world import NOW, Clock

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).parent / "screenshots"
COPIES = Path("/tmp/screens")


@dataclass
class Served:
    app: Flask
    db: Database
    url: str
    clock: Clock


@pytest.fixture
def served(pg_url: str, redis_url: str, committed_db: Database) -> Iterator[Served]:
    app = make_app(pg_url, redis_url)
    app.config["TESTING"] = False  # the browser sees the app as staff would
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.db"] = committed_db
    clock = Clock(NOW)
    app.extensions["ratchet.clock"] = clock
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    with app.app_context():
        yield Served(app, committed_db, f"http://127.0.0.1:{server.port}", clock)
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    app.extensions["ratchet.redis"].close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (scripts/ensure-browser)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A browser tab; a test fails if the page's Content-Security-Policy refused anything
    (an inline script or style, an eval) or a script threw."""
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    refused: list[str] = []
    opened.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    opened.on("pageerror", lambda error: refused.append(f"script error: {error}"))
    yield opened
    context.close()
    assert refused == [], refused


def screenshot(page: Page, name: str) -> Path:
    """A full-page screenshot under tests/browser/screenshots/ (git-ignored), copied to
    /tmp/screens/ for a person to look at."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    COPIES.mkdir(exist_ok=True)
    shutil.copy(path, COPIES / path.name)
    return path


# axe-core, fetched from the npm registry by `make assets` (scripts/fetch-axe), never committed.
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
# Each violation as one line: the rule, its impact, and where (CSS selectors).
AXE_RUN = """async () => {
  const result = await axe.run(document);
  return result.violations.map(v =>
    `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map(n => n.target.join(" ")).join(", ")}`);
}"""


def axe_violations(page: Page) -> list[str]:
    """What axe-core finds wrong with the page as it stands, one line per rule broken.

    The page's CSP refuses inline scripts, so axe is not inlined: its script tag points at
    the page's own origin and Playwright answers that one request from the fetched file."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: `make assets` fetches it (scripts/fetch-axe)")
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        origin = urlsplit(page.url)
        url = f"{origin.scheme}://{origin.netloc}/_test/axe.min.js"
        page.route(url, lambda route: route.fulfill(path=AXE), times=1)
        page.add_script_tag(url=url)
    return list(page.evaluate(AXE_RUN))
