"""Staff emails are unique within a tenant, not across tenants: a tenant's admin creating a
login learns nothing about another tenant's (or the platform's) staff, and cannot claim
an address first; each login with that email signs in to its own tenant by its password."""

from __future__ import annotations

import re

from flask import Flask, g
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Staff

from .dashboard_world import (
    PASSWORD,
    Tenants,
    csrf_token,
    make_staff,
    page_token,
    use_clock,
)


def client_for(app: Flask) -> FlaskClient:
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    return app.test_client()


def sign_in(app: Flask, email: str, password: str = PASSWORD) -> tuple[int, FlaskClient]:
    client = client_for(app)
    page = client.get("/sign-in").get_data(as_text=True)
    g.pop("csrf_token", None)
    answer = client.post(
        "/sign-in", data={"email": email, "password": password, "csrf_token": csrf_token(page)}
    )
    return answer.status_code, client


def create(admin: FlaskClient, email: str) -> tuple[str, str]:
    """What the admin is told (the answer's head, up to the staff list, with the email and
    the generated password blanked out), and the password."""
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    token = page_token(admin, "/staff")
    g.pop("_login_user", None)
    answer = admin.post("/staff", data={"csrf_token": token, "email": email, "role": "viewer"})
    page = answer.get_data(as_text=True)
    shown = re.search(r'<code id="shown-password">([^<]+)</code>', page)
    password = shown.group(1) if shown else ""
    head = page[page.index("<main") : page.index("<details")]
    if password:
        head = head.replace(password, "PASSWORD")
    return f"{answer.status_code} " + head.replace(email, "EMAIL"), password


def test_an_email_taken_in_another_tenant_reads_exactly_like_a_fresh_one_to_a_tenants_admin(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    use_clock(app)
    make_staff(db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    make_staff(db, "boss@other.test", "admin", tenants.other.tenant_id, password="boss password 1")
    make_staff(db, "root@ratchet.test", "admin", None, password="root password 12")
    _, admin = sign_in(app, "admin@acme.test")

    taken, claimed_password = create(admin, "boss@other.test")
    fresh, _ = create(admin, "nobody@else.test")
    assert taken == fresh
    assert "already exists" not in taken and "EMAIL</strong> created as viewer" in taken
    # The platform's address too.
    assert create(admin, "root@ratchet.test")[0] == fresh

    # Each login signs in to its own tenant, by its own password.
    status, boss = sign_in(app, "boss@other.test", "boss password 1")
    assert status == 302
    g.pop("_login_user", None)
    assert "other" in boss.get("/").get_data(as_text=True)
    status, copy = sign_in(app, "boss@other.test", claimed_password)
    assert status == 302
    g.pop("_login_user", None)
    whose = copy.get("/staff").status_code  # a viewer of acme: no staff page
    assert whose == 403
    status, root = sign_in(app, "root@ratchet.test", "root password 12")
    assert status == 302
    g.pop("_login_user", None)
    assert "all tenants" in root.get("/").get_data(as_text=True)

    with db.transaction() as session:
        rows = session.scalars(select(Staff).where(Staff.email == "boss@other.test")).all()
        assert {row.tenant_id for row in rows} == {tenants.acme.tenant_id, tenants.other.tenant_id}
        failed = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "staff.sign_in")
        ).all()
        assert {row.tenant_id for row in failed} >= {tenants.other.tenant_id}


def test_an_email_already_in_the_same_tenant_is_still_refused(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    use_clock(app)
    make_staff(db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    _, admin = sign_in(app, "admin@acme.test")
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    token = page_token(admin, "/staff")
    answer = admin.post(
        "/staff",
        data={"csrf_token": token, "email": "Ana@acme.test", "role": "viewer"},
        follow_redirects=True,
    )
    assert "a login for ana@acme.test already exists here" in answer.get_data(as_text=True)


def test_a_failed_sign_in_for_a_shared_email_is_audited_in_each_tenant_that_has_it(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    use_clock(app)
    make_staff(db, "sam@shared.test", "viewer", tenants.acme.tenant_id)
    make_staff(db, "sam@shared.test", "viewer", tenants.other.tenant_id)
    status, _ = sign_in(app, "sam@shared.test", "wrong password")
    assert status == 401
    with db.transaction() as session:
        failed = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "staff.sign_in_failed")
        ).all()
    assert sorted(row.tenant_id for row in failed) == sorted(
        [tenants.acme.tenant_id, tenants.other.tenant_id]
    )
