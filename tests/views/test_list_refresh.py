"""The dead-letter list and search results refresh themselves (Flask client): the poll
reads the rows a page loaded with, as they are now, in their order, adding none; another
tenant's ids are left out; a search's poll answers the list, never a redirect."""

from __future__ import annotations

import html as markup
import re
from datetime import timedelta
from urllib.parse import quote

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.repo.cancels import dismiss_message
from app.repo.claims import claim_message
from app.repo.failures import record_failed

from .dashboard_world import (
    LEASE,
    NOW,
    Clock,
    Tenants,
    failed_message,
    make_staff,
    page_token,
    sign_in,
    use_clock,
)

POLL = {"HX-Request": "true"}


@pytest.fixture
def clock(app: Flask) -> Clock:
    return use_clock(app)


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants, clock: Clock) -> FlaskClient:
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
    loaded = quote(NOW.isoformat(), safe=":")
    assert poll.group(1) == (
        f"/dead-letters/rows?ids={second},{first}&amp;loaded={loaded}&amp;lane=campaign"
    )
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


def poll_url(page: str) -> str:
    found = re.search(r'hx-get="(/dead-letters/rows[^"]*)"', page)
    assert found is not None
    return markup.unescape(found.group(1))


def row_of(html: str, message_id: int) -> str:
    start = html.index(f'id="dead-letter-{message_id}"')
    return html[start : html.index("</tr>", start)]


def requeue_on_the_page(client: FlaskClient, message_id: int) -> str:
    answer = client.post(
        f"/dead-letters/{message_id}/requeue",
        data={"csrf_token": page_token(client, "/dead-letters"), "cycle": "1"},
        headers=POLL,
    )
    assert answer.status_code == 200
    return answer.get_data(as_text=True)


def test_a_row_requeued_on_the_page_still_says_so_after_the_refresh(
    client: FlaskClient, db: Database, tenants: Tenants, clock: Clock
) -> None:
    requeued = failed_message(db, tenants.acme, minute=1)
    other = failed_message(db, tenants.acme, minute=2)
    poll = poll_url(client.get("/dead-letters").get_data(as_text=True))
    clock.now = NOW + timedelta(seconds=5)
    assert "Requeued: cycle 2, new provider key." in requeue_on_the_page(client, requeued)
    clock.now = NOW + timedelta(seconds=15)  # the list's next refresh
    html = client.get(poll, headers=POLL).get_data(as_text=True)
    assert row_ids(html) == [other, requeued]
    row = row_of(html, requeued)
    assert 'role="status"' in row
    assert "by ops@acme.test: cycle 2, new provider key." in row
    assert "queued" in row and "No longer a dead letter." in row  # what became of it
    assert "Requeued" not in row_of(html, other)
    # A page loaded after the requeue has nothing to confirm.
    later = poll_url(client.get("/dead-letters").get_data(as_text=True))
    assert "Requeued" not in client.get(later, headers=POLL).get_data(as_text=True)


def test_a_refreshed_row_whose_requeue_failed_again_says_that_cycle_failed_too(
    client: FlaskClient, db: Database, tenants: Tenants, clock: Clock
) -> None:
    message_id = failed_message(db, tenants.acme, minute=1)
    poll = poll_url(client.get("/dead-letters").get_data(as_text=True))
    clock.now = NOW + timedelta(seconds=5)
    requeue_on_the_page(client, message_id)
    with db.transaction() as session:  # the new cycle fails at once
        claim = claim_message(session, message_id, clock.now, LEASE)
        assert claim is not None
        record_failed(
            session,
            claim,
            clock.now,
            failure_class="needs_human",
            error={"provider": "whatsapp", "code": 132001, "title": "Template name does not exist"},
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
    row = row_of(client.get(poll, headers=POLL).get_data(as_text=True), message_id)
    assert "cycle 2, new provider key; that cycle failed too (below)." in row
    assert "outcome-refused" in row and "132001" in row


def test_a_dismissed_row_offers_undoing_the_dismissal_first_and_a_requeue_only_behind_it(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme, minute=1)
    with db.transaction() as session:
        dismiss_message(
            session,
            message_id,
            NOW,
            actor="colleague@acme.test",
            reason="told the customer",
            tenant_id=None,
            expected_cycle=1,
        )
    pages = [
        client.get(f"/dead-letters/rows?ids={message_id}", headers=POLL),
        client.get("/dead-letters?dismissed=1"),
    ]
    for page in pages:
        row = row_of(page.get_data(as_text=True), message_id)
        assert re.findall(r'class="primary">([^<]+)<', row) == ["Undo the dismissal"]
        assert row.index("Undo the dismissal") < row.index("Requeue it instead</summary>")
        assert '<button type="submit">Requeue</button>' in row.split("Requeue it instead")[1]
