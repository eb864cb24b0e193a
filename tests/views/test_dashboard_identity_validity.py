"""Each lane's default validity on the identities page (issue 34): shown to everyone who
sees the identity, set by admins through a CSRF form, audited with what changed, refused
with nothing stored for a bad value, another role or another tenant."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Identity

from .dashboard_world import Tenants, client_for, page_token


@pytest.fixture
def admin(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    return client_for(app, db, "admin@acme.test", "admin", tenants.acme.tenant_id)


def save(client: FlaskClient, identity_id: int, **form: str) -> str:
    token = page_token(client, "/identities")
    response = client.post(
        f"/identities/{identity_id}/validity",
        data={"csrf_token": token, **form},
        follow_redirects=True,
    )
    assert response.status_code == 200, response.status_code
    return response.get_data(as_text=True)


def validity_of(db: Database, identity_id: int) -> tuple[int | None, int | None]:
    with db.transaction() as session:
        row = session.get(Identity, identity_id, populate_existing=True)
        assert row is not None
        return row.reply_valid_for, row.campaign_valid_for


def audit_details(db: Database) -> list[object]:
    with db.transaction() as session:
        return list(
            session.scalars(
                select(AuditEntry.detail)
                .where(AuditEntry.action == "identity.default_validity")
                .order_by(AuditEntry.id)
            )
        )


def test_the_page_says_no_default_validity_until_one_is_set(
    admin: FlaskClient, tenants: Tenants
) -> None:
    page = admin.get("/identities").get_data(as_text=True)
    assert page.count("no default validity") == 2  # one identity, two lanes
    assert "Save default validity of" in page


def test_an_admin_sets_each_lane_and_the_page_and_audit_log_show_it(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    iid = tenants.acme.identity_id
    page = save(admin, iid, reply_valid_for="10m", campaign_valid_for="86400")
    assert "default validity reply lane no limit → 10 min; campaign lane no limit → 1 d" in page
    assert validity_of(db, iid) == (600, 86400)
    assert "valid 10 min by default" in page and "valid 1 d by default" in page
    # The form shows what is stored, in a form it reads back.
    assert 'value="10min"' in page and 'value="1d"' in page
    assert audit_details(db) == [
        {
            "validity": {
                "reply": {"before": None, "after": 600},
                "campaign": {"before": None, "after": 86400},
            },
            "via": "web",
        }
    ]
    audit = admin.get("/audit").get_data(as_text=True)
    assert "identity.default_validity" in audit
    assert "reply lane no limit → 10 min, campaign lane no limit → 1 d" in audit


def test_emptying_a_field_lifts_that_lane_s_default_and_only_changes_are_audited(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    iid = tenants.acme.identity_id
    save(admin, iid, reply_valid_for="600", campaign_valid_for="24h")
    page = save(admin, iid, reply_valid_for="600", campaign_valid_for="")
    assert f"Identity {iid}: default validity campaign lane 1 d → no limit." in page
    assert validity_of(db, iid) == (600, None)
    again = save(admin, iid, reply_valid_for="10m", campaign_valid_for="none")
    assert "default validity unchanged" in again
    details = audit_details(db)
    assert len(details) == 2
    assert details[1] == {"validity": {"campaign": {"before": 86400, "after": None}}, "via": "web"}


@pytest.mark.parametrize("bad", ["0", "36d", "3024001", "-60", "soon", "1.5h", "9" * 30])
def test_a_bad_value_is_refused_and_stores_nothing(
    admin: FlaskClient, db: Database, tenants: Tenants, bad: str
) -> None:
    iid = tenants.acme.identity_id
    save(admin, iid, reply_valid_for="10m")
    # A good value beside a bad one is not stored either: the form is one change.
    page = save(admin, iid, reply_valid_for="20m", campaign_valid_for=bad)
    assert f"Default validity of identity {iid} not changed" in page
    assert validity_of(db, iid) == (600, None)
    assert len(audit_details(db)) == 1


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_operators_and_viewers_cannot_set_it(
    app: Flask, db: Database, tenants: Tenants, role: str
) -> None:
    iid = tenants.acme.identity_id
    client = client_for(app, db, f"{role}@acme.test", role, tenants.acme.tenant_id)
    assert "Save default validity" not in client.get("/identities").get_data(as_text=True)
    token = page_token(client, "/identities")
    answer = client.post(
        f"/identities/{iid}/validity", data={"csrf_token": token, "reply_valid_for": "60"}
    )
    assert answer.status_code == 403
    assert validity_of(db, iid) == (None, None)
    assert audit_details(db) == []


def test_a_tenants_admin_cannot_set_another_tenants_identity(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    other = tenants.other.identity_id
    token = page_token(admin, "/identities")
    answer = admin.post(
        f"/identities/{other}/validity", data={"csrf_token": token, "reply_valid_for": "60"}
    )
    assert answer.status_code == 404
    assert validity_of(db, other) == (None, None)
    assert audit_details(db) == []


def test_a_post_without_its_csrf_token_is_refused(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    iid = tenants.acme.identity_id
    answer = admin.post(f"/identities/{iid}/validity", data={"reply_valid_for": "60"})
    assert answer.status_code == 400
    assert validity_of(db, iid) == (None, None)
