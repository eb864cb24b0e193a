"""CSV exports of the filtered dead letters and of a search: the page's filters and scope,
masked numbers, and no cell a spreadsheet would run as a formula."""

from __future__ import annotations

import csv
import io

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database

from .dashboard_world import Tenants, failed_message, make_staff, sign_in, use_clock

FORMULA = {"provider": "whatsapp", "code": 132001, "title": '=HYPERLINK("http://x")'}


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def rows(client: FlaskClient, path: str) -> list[dict[str, str]]:
    response = client.get(path)
    assert response.status_code == 200
    assert response.mimetype == "text/csv"
    return list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))


def test_the_dead_letter_export_keeps_the_filters_masks_numbers_and_defuses_formulas(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    mine = failed_message(db, tenants.acme, error=FORMULA, recipient="15557654321", key="k-1")
    failed_message(db, tenants.acme, failure_class="exhausted", minute=1)
    failed_message(db, tenants.other)
    everything = rows(client, "/dead-letters/export.csv")
    assert len(everything) == 2  # not the other tenant's
    only = rows(client, "/dead-letters/export.csv?class=needs_human")
    assert [int(r["message_id"]) for r in only] == [mine]
    assert only[0]["to"] == "…4321" and "15557654321" not in str(only)
    assert only[0]["title"].startswith("'=HYPERLINK")
    assert only[0]["idempotency_key"] == "k-1"
    page = client.get("/dead-letters?class=needs_human").get_data(as_text=True)
    assert "/dead-letters/export.csv?class=needs_human" in page


def test_the_search_export_lists_what_the_search_found(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    first = failed_message(db, tenants.acme, recipient="15550001111")
    second = failed_message(db, tenants.acme, recipient="15550002222", minute=1)
    found = rows(client, "/search/export.csv?q=1555000")
    assert {int(r["message_id"]) for r in found} == {first, second}
    assert {r["matched_on"] for r in found} == {"recipient"}


def test_the_dead_letter_page_offers_the_ones_that_failed_since_it_loaded(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    import re

    failed_message(db, tenants.acme)
    page = client.get("/dead-letters?class=needs_human").get_data(as_text=True)
    found = re.search(r'hx-get="(/dead-letters/new\?[^"]+)"', page)
    assert found is not None
    badge = found.group(1).replace("&amp;", "&")
    assert "class=needs_human" in badge
    assert "new</span>" not in client.get(badge).get_data(as_text=True)
    failed_message(db, tenants.acme, minute=11)  # after the page loaded (its clock: minute 10)
    failed_message(db, tenants.acme, failure_class="exhausted", minute=12)  # not this filter
    fresh = client.get(badge).get_data(as_text=True)
    assert "1 new</span>" in fresh and "1 dead letter failed since this page loaded" in fresh
    assert client.get("/dead-letters/new?since=yesterday").status_code == 400
