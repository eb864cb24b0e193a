"""A tenant's staff reach only their tenant's data, by any route, search or partial; another
tenant's message is a 404, never a 403. Platform staff see every tenant and narrow to one."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.models import Message

from .dashboard_world import (
    Tenants,
    csrf_token,
    failed_message,
    make_staff,
    sign_in,
    use_clock,
)


@pytest.fixture
def acme_operator(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


@pytest.fixture
def theirs(db: Database, tenants: Tenants) -> int:
    """A dead letter of the other tenant, findable by its provider id and key."""
    return failed_message(
        db, tenants.other, recipient="15559990000", key="their-key", accepted_id=None
    )


@pytest.mark.parametrize("suffix", ["", "/status"])
def test_another_tenants_message_page_and_status_partial_are_not_found(
    acme_operator: FlaskClient, theirs: int, suffix: str
) -> None:
    for headers in ({}, {"HX-Request": "true"}):
        response = acme_operator.get(f"/messages/{theirs}{suffix}", headers=headers)
        assert response.status_code == 404


@pytest.mark.parametrize("path", ["/dead-letters/{id}/requeue", "/messages/{id}/requeue"])
def test_another_tenants_message_cannot_be_requeued_by_any_route(
    acme_operator: FlaskClient, db: Database, theirs: int, path: str
) -> None:
    token = csrf_token(acme_operator.get("/dead-letters").get_data(as_text=True))
    for headers in ({}, {"HX-Request": "true"}):
        response = acme_operator.post(
            path.format(id=theirs), data={"csrf_token": token, "cycle": "1"}, headers=headers
        )
        assert response.status_code == 404
    with db.transaction() as session:
        assert session.get(Message, theirs).status == "failed"  # type: ignore[union-attr]


@pytest.mark.parametrize("query", ["{id}", "their-key", "1555999", "15559990000"])
def test_search_never_finds_another_tenants_message(
    acme_operator: FlaskClient, theirs: int, query: str
) -> None:
    response = acme_operator.get("/search", query_string={"q": query.format(id=theirs)})
    assert response.status_code == 200
    assert "No message matches" in response.get_data(as_text=True)


def test_lists_show_only_the_tenants_own_identities_and_dead_letters_whatever_the_url_says(
    acme_operator: FlaskClient, db: Database, tenants: Tenants, theirs: int
) -> None:
    ours = failed_message(db, tenants.acme)
    other = f"tenant={tenants.other.tenant_id}"
    for path in ("/dead-letters", f"/dead-letters?{other}"):
        page = acme_operator.get(path).get_data(as_text=True)
        assert f"#{ours}" in page and f"#{theirs}" not in page
    overview = acme_operator.get(f"/?{other}").get_data(as_text=True)
    assert "…0001" in overview and "…0002" not in overview
    filtered = acme_operator.get(f"/dead-letters?identity={tenants.other.identity_id}").get_data(
        as_text=True
    )
    assert f"#{theirs}" not in filtered


def test_platform_staff_see_every_tenant_and_can_narrow_to_one(
    app: Flask, db: Database, tenants: Tenants, theirs: int
) -> None:
    use_clock(app)
    ours = failed_message(db, tenants.acme)
    make_staff(db, "root@ratchet.test", "admin", None)
    client = app.test_client()
    sign_in(client, "root@ratchet.test")
    everything = client.get("/dead-letters").get_data(as_text=True)
    assert f"#{ours}" in everything and f"#{theirs}" in everything
    narrowed = client.get(f"/dead-letters?tenant={tenants.acme.tenant_id}").get_data(as_text=True)
    assert f"#{ours}" in narrowed and f"#{theirs}" not in narrowed
    assert client.get(f"/messages/{theirs}").status_code == 200
