"""Sessions that end: a cookie copied before sign-out, a password reset, disabling or a role
change opens nothing afterwards (the login's session version moved), and no session lives
past its absolute lifetime however busy it is."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask, g
from flask.testing import FlaskClient

from app.auth import SESSION_ABSOLUTE_LIFETIME
from app.db import Database
from app.repo.staff import staff_with_email

from .dashboard_world import Tenants, make_staff, page_token, sign_in, use_clock


def fresh(client: FlaskClient) -> FlaskClient:
    """Forget what Flask-Login and Flask-WTF cached in the shared app context's `g`, as a
    new request in production would."""
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    return client


def stolen_copy(app: Flask, client: FlaskClient) -> FlaskClient:
    """Another browser holding a copy of `client`'s session cookie."""
    cookie = client.get_cookie("session")
    assert cookie is not None
    thief = app.test_client()
    thief.set_cookie("session", cookie.value)
    assert fresh(thief).get("/").status_code == 200
    return thief


def opens(client: FlaskClient, path: str = "/") -> bool:
    return fresh(client).get(path).status_code == 200


def staff_id(db: Database, email: str) -> int:
    with db.transaction() as session:
        (found,) = staff_with_email(session, email)
        return found.id


def test_a_cookie_copied_before_sign_out_opens_nothing_after_it(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    use_clock(app)
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ana@acme.test")
    thief = stolen_copy(app, client)

    response = fresh(client).post("/sign-out", data={"csrf_token": page_token(client)})
    assert response.status_code == 302

    assert fresh(thief).get("/").status_code == 302
    # Signing in again starts a new session; the stolen one stays dead.
    sign_in(fresh(client), "ana@acme.test")
    assert opens(client)
    assert not opens(thief)


@pytest.mark.parametrize(
    ("action", "form"),
    [("password", {}), ("disable", {}), ("role", {"role": "operator"})],
)
def test_an_admins_password_reset_disable_or_role_change_ends_the_staff_members_sessions(
    app: Flask, db: Database, tenants: Tenants, action: str, form: dict[str, str]
) -> None:
    use_clock(app)
    make_staff(db, "boss@acme.test", "admin", tenants.acme.tenant_id)
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    ana = app.test_client()
    sign_in(ana, "ana@acme.test")
    thief = stolen_copy(app, ana)
    boss = app.test_client()
    sign_in(fresh(boss), "boss@acme.test")
    target = staff_id(db, "ana@acme.test")

    token = page_token(fresh(boss), "/staff")
    answer = fresh(boss).post(f"/staff/{target}/{action}", data={"csrf_token": token, **form})
    assert answer.status_code in (200, 302)

    assert not opens(ana)
    assert not opens(thief)
    if action == "disable":
        # Enabling the login again does not bring the old sessions back.
        token = page_token(fresh(boss), "/staff")
        fresh(boss).post(f"/staff/{target}/enable", data={"csrf_token": token})
        assert not opens(ana)
        assert not opens(thief)
    assert opens(boss)  # the admin's own session is untouched


def test_a_session_ends_at_its_absolute_lifetime_however_busy(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    clock = use_clock(app)
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ana@acme.test")
    # Another host whose clock runs a minute behind still takes it.
    clock.now -= timedelta(minutes=1)
    assert opens(client)
    clock.now += timedelta(minutes=1)
    # A page every hour keeps the idle lifetime sliding...
    for _ in range(int(SESSION_ABSOLUTE_LIFETIME / timedelta(hours=1)) - 1):
        clock.now += timedelta(hours=1)
        assert opens(client)
    clock.now += timedelta(hours=1) - timedelta(seconds=1)
    assert opens(client)
    # ...but not past the absolute one.
    clock.now += timedelta(seconds=1)
    response = fresh(client).get("/")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/sign-in")
