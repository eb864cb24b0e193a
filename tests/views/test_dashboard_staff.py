"""The staff page through the Flask client: admins create logins, change roles, disable
and reset passwords, within their own tenant only; a disabled login cannot sign in and its
open session stops working; every change is audited."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.crypto import check_password
from app.db import Database
from app.models import Staff

from .dashboard_world import PASSWORD, Tenants, csrf_token, make_staff, page_token, use_clock
from .staff_sessions import as_, audits, post, signed_in


@pytest.fixture
def admin(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    return signed_in(app, "admin@acme.test")


def staff_row(db: Database, email: str) -> Staff | None:
    with db.transaction() as session:
        found = session.scalars(select(Staff).where(Staff.email == email)).one_or_none()
        if found is not None:
            session.expunge(found)
        return found


def shown_password(page: str) -> str:
    found = re.search(r'<code id="shown-password">([^<]+)</code>', page)
    assert found, "no password shown"
    return found.group(1)


def test_an_admin_creates_a_login_whose_generated_password_is_shown_once_and_works(
    app: Flask, admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    status, page = post(admin, "/staff", email="New.Person@acme.test", role="operator")
    assert status == 200 and "new.person@acme.test</strong> created as operator" in page
    password = shown_password(page)
    row = staff_row(db, "new.person@acme.test")
    assert row is not None and row.role == "operator" and row.tenant_id == tenants.acme.tenant_id
    assert check_password(password, row.password_hash) and password not in row.password_hash
    (audit,) = audits(db, "staff.create")
    assert audit.actor == "admin@acme.test" and audit.tenant_id == tenants.acme.tenant_id
    assert audit.detail == {"email": "new.person@acme.test", "role": "operator", "platform": False}
    assert password not in str(audit.detail)
    # Not shown again.
    as_(admin)
    assert password not in admin.get("/staff").get_data(as_text=True)
    # And it signs in.
    fresh = app.test_client()
    as_(fresh)
    sign_page = fresh.get("/sign-in").get_data(as_text=True)
    answer = fresh.post(
        "/sign-in",
        data={
            "email": "new.person@acme.test",
            "password": password,
            "csrf_token": csrf_token(sign_page),
        },
    )
    assert answer.status_code == 302


def test_a_tenants_admin_cannot_make_platform_staff(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    status, _ = post(admin, "/staff", email="sneaky@acme.test", role="admin", tenant="")
    assert status == 200
    row = staff_row(db, "sneaky@acme.test")
    assert row is not None and row.tenant_id == tenants.acme.tenant_id  # never platform
    other = str(tenants.other.tenant_id)
    post(admin, "/staff", email="sneaky2@acme.test", role="admin", tenant=other)
    row = staff_row(db, "sneaky2@acme.test")
    assert row is not None and row.tenant_id == tenants.acme.tenant_id


def test_platform_admins_create_platform_staff_or_another_tenants(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    use_clock(app)
    make_staff(db, "root@ratchet.test", "admin", None)
    root = signed_in(app, "root@ratchet.test")
    post(root, "/staff", email="oncall@ratchet.test", role="operator", tenant="")
    post(root, "/staff", email="boss@other.test", role="admin", tenant=str(tenants.other.tenant_id))
    oncall, boss = staff_row(db, "oncall@ratchet.test"), staff_row(db, "boss@other.test")
    assert oncall is not None and oncall.tenant_id is None
    assert boss is not None and boss.tenant_id == tenants.other.tenant_id
    (audit, _) = audits(db, "staff.create")
    assert audit.tenant_id is None and audit.detail is not None and audit.detail["platform"]


@pytest.mark.parametrize(
    ("form", "said"),
    [
        ({"email": "not-an-email", "role": "viewer"}, "is not an email address"),
        ({"email": "x@acme.test", "role": "owner"}, "unknown role"),
        ({"email": "x@acme.test", "role": "viewer", "password": "short"}, "at least 12"),
        ({"email": "admin@acme.test", "role": "viewer"}, "already exists"),
    ],
)
def test_bad_new_logins_are_refused_with_the_reason(
    admin: FlaskClient, db: Database, form: dict[str, str], said: str
) -> None:
    status, page = post(admin, "/staff", **form)
    assert status == 200 and "Not created" in page and said in page
    assert staff_row(db, "x@acme.test") is None
    assert audits(db, "staff.create") == []


def test_an_admin_changes_a_role_and_it_applies_once_they_sign_in_again(
    app: Flask, admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "view@acme.test", "viewer", tenants.acme.tenant_id)
    viewer = signed_in(app, "view@acme.test")
    as_(viewer)
    assert "Pause identity" not in viewer.get("/identities").get_data(as_text=True)
    target = staff_row(db, "view@acme.test")
    assert target is not None
    _, page = post(admin, f"/staff/{target.id}/role", role="operator")
    assert f"Staff {target.id} is now operator" in page
    as_(viewer)
    assert viewer.get("/identities").status_code == 302  # their session ended
    viewer = signed_in(app, "view@acme.test")
    as_(viewer)
    assert "Pause identity" in viewer.get("/identities").get_data(as_text=True)
    (audit,) = audits(db, "staff.role")
    assert audit.detail == {"email": "view@acme.test", "from": "viewer", "to": "operator"}


def test_a_disabled_login_cannot_sign_in_and_its_open_session_stops(
    app: Flask, admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "leaver@acme.test", "operator", tenants.acme.tenant_id)
    leaver = signed_in(app, "leaver@acme.test")
    as_(leaver)
    assert leaver.get("/").status_code == 200
    target = staff_row(db, "leaver@acme.test")
    assert target is not None
    _, page = post(admin, f"/staff/{target.id}/disable")
    assert "disabled: cannot sign in, and open sessions have ended" in page
    as_(leaver)
    answer = leaver.get("/")
    assert answer.status_code == 302 and "/sign-in" in answer.headers["Location"]
    fresh = app.test_client()
    as_(fresh)
    sign_page = fresh.get("/sign-in").get_data(as_text=True)
    refused = fresh.post(
        "/sign-in",
        data={
            "email": "leaver@acme.test",
            "password": PASSWORD,
            "csrf_token": csrf_token(sign_page),
        },
    )
    assert refused.status_code == 401
    assert "That email and password do not match" in refused.get_data(as_text=True)
    assert len(audits(db, "staff.disable")) == 1
    # Enabled again, it signs in.
    post(admin, f"/staff/{target.id}/enable")
    signed_in(app, "leaver@acme.test")
    assert len(audits(db, "staff.enable")) == 1


def test_an_admin_cannot_disable_or_demote_their_own_login(
    admin: FlaskClient, db: Database
) -> None:
    me = staff_row(db, "admin@acme.test")
    assert me is not None
    _, page = post(admin, f"/staff/{me.id}/disable")
    assert "you cannot disable your own login" in page
    _, page = post(admin, f"/staff/{me.id}/role", role="viewer")
    assert "you cannot change the role of your own login" in page
    me = staff_row(db, "admin@acme.test")
    assert me is not None and me.role == "admin" and me.disabled_at is None


def test_a_password_reset_shows_a_new_password_once_and_the_old_one_stops_working(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "forgot@acme.test", "viewer", tenants.acme.tenant_id)
    target = staff_row(db, "forgot@acme.test")
    assert target is not None
    status, page = post(admin, f"/staff/{target.id}/password")
    assert status == 200 and "forgot@acme.test</strong> given a new password" in page
    password = shown_password(page)
    after = staff_row(db, "forgot@acme.test")
    assert after is not None
    assert check_password(password, after.password_hash)
    assert not check_password(PASSWORD, after.password_hash)
    (audit,) = audits(db, "staff.password_reset")
    assert audit.detail == {"email": "forgot@acme.test"} and password not in str(audit.detail)


def test_a_tenants_admin_cannot_see_or_touch_another_tenants_or_platform_staff(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "them@other.test", "operator", tenants.other.tenant_id)
    make_staff(db, "root@ratchet.test", "admin", None)
    as_(admin)
    page = admin.get("/staff").get_data(as_text=True)
    assert "them@other.test" not in page and "root@ratchet.test" not in page
    for email in ("them@other.test", "root@ratchet.test"):
        target = staff_row(db, email)
        assert target is not None
        for action, form in (
            ("role", {"role": "viewer"}),
            ("disable", {}),
            ("password", {}),
        ):
            status, _ = post(admin, f"/staff/{target.id}/{action}", **form)
            assert status == 404, (email, action)
    for email in ("them@other.test", "root@ratchet.test"):
        row = staff_row(db, email)
        assert (
            row is not None
            and row.disabled_at is None
            and check_password(PASSWORD, row.password_hash)
        )


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_admins_reach_the_staff_page(
    app: Flask, db: Database, tenants: Tenants, role: str
) -> None:
    use_clock(app)
    make_staff(db, f"{role}@acme.test", role, tenants.acme.tenant_id)
    client = signed_in(app, f"{role}@acme.test")
    as_(client)
    assert client.get("/staff").status_code == 403
    as_(client)
    assert "Staff</a>" not in client.get("/").get_data(as_text=True)
    token = page_token(client, "/")
    as_(client)
    answer = client.post(
        "/staff", data={"csrf_token": token, "email": "x@acme.test", "role": "admin"}
    )
    assert answer.status_code == 403
    assert staff_row(db, "x@acme.test") is None
