"""An identity's provider events page (`/identities/<id>/events`): Meta's account, template
and quality events of its business account, newest first, each with the verbatim delivery
and what Ratchet did; filtered by kind; another tenant's staff do not find it."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from markupsafe import escape

from app.crypto import SecretBox
from app.db import Database
from app.repo.identities import update_identity

from ..conftest import SECRET_KEY, T0
from ..meta import BUSINESS_ACCOUNT_ID, account_body, encode, sign
from .dashboard_world import Tenants, make_staff, make_tenants, sign_in, use_clock

pytestmark = pytest.mark.usefixtures("one_user_per_request")

SECRET = "app-secret-acme"  # make_tenants' acme identity


@pytest.fixture
def tenants(db: Database) -> Tenants:
    world = make_tenants(db)
    with db.transaction() as session:
        update_identity(
            session,
            SecretBox(SECRET_KEY),
            world.acme.identity_id,
            business_account_id=BUSINESS_ACCOUNT_ID,
            now=T0,
        )
    return world


def deliver(app: Flask, name: str) -> bytes:
    raw = encode(account_body(name))
    response = app.test_client().post(
        "/webhooks/whatsapp",
        data=raw,
        headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)},
    )
    assert response.status_code == 200, response.get_json()
    return raw


def staff_client(app: Flask, db: Database, email: str, tenant_id: int | None) -> FlaskClient:
    use_clock(app)
    make_staff(db, email, "viewer", tenant_id)
    client = app.test_client()
    sign_in(client, email)
    return client


def test_the_page_lists_the_accounts_events_newest_first_verbatim_with_what_was_done(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    first = deliver(app, "phone_number_quality_update")
    deliver(app, "template_status_paused")
    last = deliver(app, "account_restriction")
    client = staff_client(app, db, "look@acme.test", tenants.acme.tenant_id)
    page = client.get(f"/identities/{tenants.acme.identity_id}/events").get_data(as_text=True)
    table = page.split('id="provider-events"', 1)[1]
    order = [table.index(word) for word in ("ACCOUNT_RESTRICTION", "PAUSED", "DOWNGRADE")]
    assert order == sorted(order)  # newest first
    assert str(escape(last.decode())) in table  # the delivery, verbatim
    assert str(escape(first.decode())) in table
    assert "Meta restricted the account: RESTRICTED_BIZ_INITIATED_MESSAGING" in table
    assert "waiting messages held until Meta approves it again" in table
    assert "shown on the identities page" in table

    filtered = client.get(
        f"/identities/{tenants.acme.identity_id}/events?kind=account_update"
    ).get_data(as_text=True)
    rows = filtered.split('id="provider-events"', 1)[1]
    assert "ACCOUNT_RESTRICTION" in rows and "DOWNGRADE" not in rows and "PAUSED" not in rows
    identities = client.get("/identities").get_data(as_text=True)
    assert f"/identities/{tenants.acme.identity_id}/events" in identities


def test_another_tenants_staff_do_not_find_the_page(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    deliver(app, "account_restriction")
    client = staff_client(app, db, "look@other.test", tenants.other.tenant_id)
    response = client.get(f"/identities/{tenants.acme.identity_id}/events")
    assert response.status_code == 404
    assert "ACCOUNT_RESTRICTION" not in response.get_data(as_text=True)


def test_an_identity_whose_business_account_is_unknown_says_so(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    client = staff_client(app, db, "look@other.test", tenants.other.tenant_id)
    page = client.get(f"/identities/{tenants.other.identity_id}/events").get_data(as_text=True)
    assert "business account not known yet" in page
