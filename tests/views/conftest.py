"""Fixtures of the view tests: the two tenants of `dashboard_world` (acme and other), and
`one_user_per_request` for a module that uses several signed-in clients in one app context
(`pytestmark = pytest.mark.usefixtures("one_user_per_request")`)."""

from __future__ import annotations

import pytest
from flask import Flask, g

from app.db import Database

from .dashboard_world import Tenants, make_tenants


@pytest.fixture
def tenants(db: Database) -> Tenants:
    return make_tenants(db)


@pytest.fixture
def one_user_per_request(app: Flask) -> None:
    """Flask-Login keeps the signed-in user, and Flask-WTF the CSRF token, on `g`, which one
    app context shares between clients: each request forgets the last one's, so that each
    client is itself."""

    def forget() -> None:
        g.pop("_login_user", None)
        g.pop("csrf_token", None)

    app.before_request(forget)
