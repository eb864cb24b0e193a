"""What a person does in the dashboard in a real browser: signs in from the front page
(`sign_in`) or straight at the form (`sign_in_on_the_form`), and moves by keyboard alone
(`tab_to`).
"""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

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
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


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
