"""What a person does in the dashboard in a real browser: signs in from the front page
(`sign_in`) or straight at the form (`sign_in_on_the_form`), goes to another page and waits
for it to load (`follow`), and moves by keyboard alone (`tab_to`).

A page is wired only once it has loaded: its scripts are deferred, and htmx sets its
handlers and its poll timers when the document is parsed. A test that clicks an htmx button
before then posts the plain form instead; one that moves Playwright's clock before then
passes timers that are not yet set, and the poll never comes. So a step that loads a page
waits for its load event (`page.goto` does by itself; a click or a key does not).
"""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect

from ..views.dashboard_world import PASSWORD
from .conftest import Served


def sign_in(page: Page, served: Served, email: str) -> None:
    """From the front page, which sends a visitor to the sign-in form."""
    page.goto(served.url + "/")
    expect(page).to_have_url(re.compile(r"/sign-in"))
    fill_in_sign_in(page, email)


def sign_in_on_the_form(page: Page, served: Served, email: str) -> None:
    """Straight at the sign-in form."""
    page.goto(served.url + "/sign-in")
    fill_in_sign_in(page, email)


def fill_in_sign_in(page: Page, email: str) -> None:
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    follow(page, page.get_by_role("button", name="Sign in"))
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def follow(page: Page, target: Locator | str) -> None:
    """Click a link or a plain form's button (or press a key on one, `target` naming the
    key), and return once the page it loads has loaded."""
    with page.expect_navigation():
        if isinstance(target, str):
            page.keyboard.press(target)
        else:
            target.click()


def tab_to(page: Page, matches: str, limit: int = 120) -> None:
    """Press Tab until the focused element satisfies the JS predicate `matches` (on `el`),
    checking on the way that every focused element shows a focus outline."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate(f"(el => {matches})(document.activeElement)"):
            outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
            assert outline != "none", page.evaluate("document.activeElement.outerHTML")
            return
    raise AssertionError(f"never reached by Tab: {matches}")
