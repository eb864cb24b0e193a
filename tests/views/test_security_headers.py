"""Security headers on every response: a CSP with no inline script, no eval and no inline
style, no framing, nosniff (the Meta handshake's echoed challenge too), a same-origin
Referer, no-store on the pages, HSTS only over https; and pages that keep that CSP (no
inline script, style or htmx filter expression left in any page)."""

from __future__ import annotations

import re

import pytest
from flask import Flask, g
from flask.testing import FlaskClient

from app.db import Database

from ..conftest import METRICS_AUTH, make_app
from .dashboard_world import (
    Tenants,
    failed_message,
    make_staff,
    page_token,
    sign_in,
    use_clock,
)


@pytest.fixture
def admin(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "admin@acme.test")
    return client


def anonymous(app: Flask) -> FlaskClient:
    """A visitor with no session (the tests share one app context: forget the signed-in
    user Flask-Login cached in `g`)."""
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    return app.test_client()


def assert_secured(headers: object) -> None:
    csp = headers["Content-Security-Policy"]  # type: ignore[index]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in csp
    assert headers["X-Frame-Options"] == "DENY"  # type: ignore[index]
    assert headers["X-Content-Type-Options"] == "nosniff"  # type: ignore[index]
    assert headers["Referrer-Policy"] == "same-origin"  # type: ignore[index]


def test_every_kind_of_response_carries_the_security_headers(
    app: Flask, admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    visitor = anonymous(app)
    answers = {
        "sign-in page": visitor.get("/sign-in"),
        "a redirect to sign-in": visitor.get("/stuck"),
        "the Meta handshake": visitor.get(
            "/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token=verify-acme"
            "&hub.challenge=<script>alert(1)</script>"
        ),
        "a webhook refused": visitor.post("/webhooks/whatsapp", data=b"{}"),
        "the API refused": visitor.get("/v1/messages/1"),
        "health": visitor.get("/healthz"),
        "metrics": visitor.get("/metrics", headers=METRICS_AUTH),
        "the stylesheet": visitor.get("/static/dashboard.css"),
        "a signed-in page": admin.get("/"),
        "a signed-in poll": admin.get("/", headers={"HX-Request": "true"}),
        "a 404 page": admin.get("/messages/999999"),
    }
    for what, response in answers.items():
        response.close()
        assert response.status_code < 500, what
        assert_secured(response.headers)
    handshake = answers["the Meta handshake"]
    assert handshake.status_code == 200
    assert handshake.mimetype == "text/plain"
    assert "Strict-Transport-Security" not in answers["a signed-in page"].headers


def test_pages_are_never_stored_but_the_static_files_may_be(
    app: Flask, admin: FlaskClient, db: Database
) -> None:
    assert admin.get("/").headers["Cache-Control"] == "no-store"
    assert anonymous(app).get("/sign-in").headers["Cache-Control"] == "no-store"
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    # The answer that shows a generated password once.
    form = {"csrf_token": page_token(admin, "/staff"), "email": "new@acme.test", "role": "viewer"}
    created = admin.post("/staff", data=form)
    assert created.status_code == 200 and "new@acme.test" in created.get_data(as_text=True)
    assert created.headers["Cache-Control"] == "no-store"
    with app.test_client().get("/static/dashboard.css") as css:
        assert "no-store" not in css.headers.get("Cache-Control", "")


def test_hsts_is_sent_only_when_the_public_address_is_https(pg_url: str, redis_url: str) -> None:
    app = make_app(pg_url, redis_url, public_base_url="https://ratchet.example")
    try:
        response = app.test_client().get("/healthz")
    finally:
        app.extensions["ratchet.db"].dispose()
        app.extensions["ratchet.redis"].close()
    assert response.headers["Strict-Transport-Security"] == "max-age=31536000"


def test_no_page_holds_an_inline_script_an_inline_style_or_an_htmx_eval_filter(
    app: Flask, admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme)
    paths = [
        "/",
        "/stuck",
        "/dead-letters",
        f"/messages/{message_id}",
        "/identities",
        "/alerts",
        "/audit",
        "/staff",
        "/cancel",
        f"/search?q={message_id}",
    ]
    pages = {path: admin.get(path, follow_redirects=True) for path in paths}
    pages["/sign-in"] = anonymous(app).get("/sign-in")
    for path, response in pages.items():
        html = response.get_data(as_text=True)
        assert response.status_code == 200, path
        for tag in re.findall(r"<script\b[^>]*>", html):
            assert "src=" in tag, (path, tag)
        assert not re.search(r"\sstyle=", html), path
        assert not re.search(r"\son[a-z]+=", html), path
        assert not re.search(r'hx-trigger="[^"]*\[', html), path
        assert "includeIndicatorStyles" in html and '"allowEval": false' in html, path
