"""What the outside review found holding, kept by a test each: every state-changing
dashboard form refuses a POST without its CSRF token (and changes nothing), and no `next`
after sign-in leads off the site."""

from __future__ import annotations

import re

import pytest
from flask import Flask, g
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Identity, Message, Staff, Tenant

from .dashboard_world import (
    PASSWORD,
    csrf_token,
    failed_message,
    make_staff,
    make_tenants,
    use_clock,
)
from .dashboard_world import sign_in as sign_in_client

MACHINE = ("/v1/", "/webhooks/", "/static/")


def snapshot(database: Database) -> list[object]:
    with database.transaction() as session:
        return [
            [tuple(row) for row in session.execute(select(*model.__table__.c).order_by("id"))]
            for model in (Message, Staff, Identity, Tenant, AuditEntry)
        ]


def test_every_dashboard_post_without_its_csrf_token_is_refused_and_changes_nothing(
    app: Flask, db: Database
) -> None:
    use_clock(app)
    tenants = make_tenants(db)
    message_id = failed_message(db, tenants.acme)
    make_staff(db, "root@ratchet.test", "admin", None)
    client = app.test_client()
    sign_in_client(client, "root@ratchet.test")
    before = snapshot(db)
    posts = [
        rule
        for rule in app.url_map.iter_rules()
        if "POST" in (rule.methods or set()) and not rule.rule.startswith(MACHINE)
    ]
    assert len(posts) >= 17
    form = {
        "reason": "no token",
        "scope": "campaign",
        "cycle": "1",
        "role": "viewer",
        "email": "x@acme.test",
        "token": "t" * 20,
        "password": PASSWORD,
    }
    for rule in posts:
        path = re.sub(r"<int:[a-z_]+>", str(message_id), rule.rule)
        g.pop("_login_user", None)
        response = client.post(path, data=form)
        assert response.status_code == 400, (rule.rule, response.status_code)
    assert snapshot(db) == before


NEXT_VARIANTS = [
    "//evil.example/",
    "https://evil.example/",
    "http://evil.example",
    "http:evil.example",
    "https:/evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "\\/evil.example",
    "/\t/evil.example",
    "/\n/evil.example",
    " //evil.example",
    "//evil.example%2F",
    "///evil.example",
    "javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "//@evil.example",
    "https://ratchet.example@evil.example",
    "evil.example",
]


@pytest.mark.parametrize("target", NEXT_VARIANTS)
def test_no_next_address_leads_off_the_site_after_sign_in(
    app: Flask, db: Database, target: str
) -> None:
    use_clock(app)
    tenants = make_tenants(db)
    make_staff(db, "ana@acme.test", "viewer", tenants.acme.tenant_id)
    client: FlaskClient = app.test_client()
    page = client.get("/sign-in").get_data(as_text=True)
    response = client.post(
        "/sign-in",
        data={
            "email": "ana@acme.test",
            "password": PASSWORD,
            "csrf_token": csrf_token(page),
            "next": target,
        },
    )
    assert response.status_code == 302
    location = response.headers["Location"]
    # What a browser would follow, with the tabs, newlines and backslashes it forgives.
    followed = re.sub(r"[\t\n\r ]", "", location).replace("\\", "/")
    assert followed.startswith("/") and not followed.startswith("//"), location
    assert "evil" not in location
