"""Staff sign-in: sessions, CSRF, the throttle kept in the database, and sign-out."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database

from .dashboard_world import (
    PASSWORD,
    Tenants,
    csrf_token,
    make_staff,
    page_token,
    sign_in,
    use_clock,
)


@pytest.fixture
def client(app: Flask, db: Database) -> FlaskClient:
    use_clock(app)
    return app.test_client()


def attempt(client: FlaskClient, email: str, password: str) -> tuple[int, str]:
    token = csrf_token(client.get("/sign-in").get_data(as_text=True))
    response = client.post(
        "/sign-in", data={"email": email, "password": password, "csrf_token": token}
    )
    return response.status_code, response.get_data(as_text=True)


@pytest.mark.parametrize("path", ["/", "/stuck", "/dead-letters", "/messages/1", "/search?q=1"])
def test_a_signed_out_request_for_any_page_is_sent_to_sign_in(
    client: FlaskClient, path: str
) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/sign-in?next=")


def test_a_signed_out_poll_is_told_to_load_the_sign_in_page_instead_of_a_table(
    client: FlaskClient,
) -> None:
    response = client.get("/", headers={"HX-Request": "true"})
    assert response.status_code == 401
    assert response.headers["HX-Redirect"].startswith("/sign-in")


def test_staff_sign_in_with_the_right_password_and_land_on_the_page_they_asked_for(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    token = csrf_token(client.get("/sign-in").get_data(as_text=True))
    response = client.post(
        "/sign-in",
        data={
            "email": "Ana@Acme.test ",
            "password": PASSWORD,
            "csrf_token": token,
            "next": "/dead-letters",
        },
    )
    assert response.status_code == 302
    assert response.headers["Location"] == "/dead-letters"
    assert client.get("/").status_code == 200


def test_the_session_cookie_is_http_only_and_same_site_lax(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    token = csrf_token(client.get("/sign-in").get_data(as_text=True))
    response = client.post(
        "/sign-in", data={"email": "ana@acme.test", "password": PASSWORD, "csrf_token": token}
    )
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert "Secure" not in cookie  # served over http here


def test_the_session_cookie_is_secure_when_the_app_is_served_over_https(
    pg_url: str, redis_url: str
) -> None:
    from ..conftest import make_app

    app = make_app(pg_url, redis_url, public_base_url="https://ratchet.example")
    assert app.config["SESSION_COOKIE_SECURE"] is True
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()


def test_an_unknown_email_and_a_wrong_password_read_exactly_alike(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    unknown = attempt(client, "nobody@acme.test", PASSWORD)
    wrong = attempt(client, "ana@acme.test", "not it")
    assert unknown[0] == wrong[0] == 401
    assert "do not match a staff login" in unknown[1]
    strip = [
        body.replace("nobody@acme.test", "").replace("ana@acme.test", "")
        for _, body in (unknown, wrong)
    ]
    assert strip[0] == strip[1]


def test_a_post_without_a_csrf_token_is_refused(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    response = client.post("/sign-in", data={"email": "ana@acme.test", "password": PASSWORD})
    assert response.status_code == 400
    assert "The form had expired" in response.get_data(as_text=True)


def test_after_five_failures_from_one_address_that_account_waits_there_even_with_the_password(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "ana@acme.test", "operator", tenants.acme.tenant_id)
    for _ in range(5):
        assert attempt(client, "ana@acme.test", "guess")[0] == 401
    status, body = attempt(client, "ana@acme.test", PASSWORD)
    assert status == 429
    assert "Too many attempts; try again in 30 s." in body
    # Thirty seconds on (the dashboard's clock, not the wall's), the next try is checked.
    app.extensions["ratchet.clock"].now += timedelta(seconds=30)
    assert attempt(client, "ana@acme.test", PASSWORD)[0] == 302
    assert client.get("/").status_code == 200


def test_sign_in_is_throttled_per_address_across_accounts(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "ana@acme.test", "operator", tenants.acme.tenant_id)
    for n in range(20):
        assert attempt(client, f"guess{n}@acme.test", "guess")[0] == 401
    assert attempt(client, "ana@acme.test", PASSWORD)[0] == 429


def test_sign_out_is_a_post_and_ends_the_session(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    sign_in(client, "ana@acme.test")
    assert client.get("/sign-out").status_code == 405
    response = client.post("/sign-out", data={"csrf_token": page_token(client)})
    assert response.status_code == 302
    assert client.get("/").status_code == 302


def test_a_next_address_on_another_site_is_ignored_after_sign_in(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    token = csrf_token(client.get("/sign-in").get_data(as_text=True))
    response = client.post(
        "/sign-in",
        data={
            "email": "ana@acme.test",
            "password": PASSWORD,
            "csrf_token": token,
            "next": "//evil.example/",
        },
    )
    assert response.headers["Location"] == "/"


def test_a_poll_that_left_before_an_action_cannot_overwrite_the_cookie_holding_its_flash(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    """Two tabs share one cookie: the overview polling in one, an operator pausing in the
    other. The poll left with the cookie as it was before the pause; if its answer sent
    that cookie back it would land after the pause's and erase the flash saying what the
    pause did (seen once in a browser test under load)."""
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    sign_in(client, "ops@acme.test")
    cookie = client.get_cookie("session")
    assert cookie is not None
    before = cookie.value

    response = client.post(
        f"/identities/{tenants.acme.identity_id}/pause",
        data={
            "csrf_token": page_token(client, "/identities"),
            "scope": "campaign",
            "reason": "wrong list",
        },
    )
    assert response.status_code == 302

    other_tab = app.test_client()
    other_tab.set_cookie("session", before)
    poll = other_tab.get("/", headers={"HX-Request": "true"})
    assert poll.status_code == 200 and "overview-table" in poll.get_data(as_text=True)
    assert "Set-Cookie" not in poll.headers

    # The operator's tab still has its flash; what a person does still slides the session.
    page = client.get("/identities")
    assert "campaign lane paused" in page.get_data(as_text=True)
    assert "Set-Cookie" in client.get("/").headers


def test_the_machine_facing_routes_never_read_or_slide_a_staff_members_session(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    """A provider's webhook and a tenant's API call are authenticated by signature or key:
    a dashboard cookie sent along is not read (nor is it signed again), so it neither
    signs them in nor keeps the session alive."""
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    sign_in(client, "ops@acme.test")
    assert "Set-Cookie" in client.get("/").headers  # a person's page slides the session

    api = client.get("/v1/messages/1")
    assert api.status_code == 401
    webhook = client.post(
        "/webhooks/whatsapp", data=b"{}", headers={"Content-Type": "application/json"}
    )
    assert webhook.status_code == 400
    for response in (api, webhook):
        assert "Set-Cookie" not in response.headers
