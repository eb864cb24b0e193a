"""The dead-letter list and search results refresh themselves (Flask client): the poll
reads the rows a page loaded with, as they are now, in their order, adding none; another
tenant's ids are left out; a search's poll answers the list, never a redirect."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.repo.cancels import dismiss_message

from .dashboard_world import (
    NOW,
    Tenants,
    failed_message,
    make_staff,
    sign_in,
    use_clock,
)

POLL = {"HX-Request": "true"}


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def row_ids(html: str) -> list[int]:
    return [int(found) for found in re.findall(r'<tr id="dead-letter-(\d+)"', html)]


def test_the_dead_letter_page_polls_for_the_rows_it_loaded_with(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    first = failed_message(db, tenants.acme, minute=1)
    second = failed_message(db, tenants.acme, minute=2)
    page = client.get("/dead-letters?lane=campaign").get_data(as_text=True)
    assert row_ids(page) == [second, first]
    poll = re.search(r'hx-get="(/dead-letters/rows[^"]*)"', page)
    assert poll is not None, page[page.index("dead-letters-list") - 100 :][:600]
    assert poll.group(1) == f"/dead-letters/rows?ids={second},{first}&amp;lane=campaign"
    assert 'hx-swap="morph"' in page


def test_the_poll_shows_a_row_dismissed_elsewhere_in_place_and_adds_no_new_one(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    first = failed_message(db, tenants.acme, minute=1)
    second = failed_message(db, tenants.acme, minute=2)
    with db.transaction() as session:
        dismiss_message(
            session,
            first,
            NOW,
            actor="colleague@acme.test",
            reason="dup",
            tenant_id=None,
            expected_cycle=1,
        )
    failed_message(db, tenants.acme, minute=3)  # new since: the badge offers it, not the rows
    theirs = failed_message(db, tenants.other, minute=4)
    answer = client.get(f"/dead-letters/rows?ids={second},{first},{theirs}", headers=POLL)
    html = answer.get_data(as_text=True)
    assert answer.status_code == 200
    assert row_ids(html) == [second, first]
    dismissed = html[html.index(f'id="dead-letter-{first}"') :]
    assert "Dismissed: off the actionable list." in dismissed
    assert "<html" not in html  # the partial alone


def test_a_search_poll_answers_the_list_even_for_one_hit(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    only = failed_message(db, tenants.acme, recipient="15559990001")
    assert client.get("/search?q=0001").status_code == 302  # typed: one hit opens it
    html = client.get("/search?q=0001", headers=POLL).get_data(as_text=True)
    assert f'id="hit-{only}"' in html and 'id="search-results"' in html
    assert "<html" not in html
