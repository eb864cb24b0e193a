"""Staff signed in to the dashboard, each with a client of its own, in the one app context the
view tests share: `as_` before each client's request, `signed_in` for a new client, a form
`post` with its CSRF token, and the audit rows an action wrote (`audits`).
"""

from __future__ import annotations

from flask import Flask, g
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry

from .dashboard_world import PASSWORD, csrf_token, page_token


def as_(client: FlaskClient) -> FlaskClient:
    """The tests share one app context, and Flask-Login and Flask-WTF cache the user and
    the CSRF token in `g`: forget them before another client's request, as a new request
    in production would."""
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    return client


def signed_in(app: Flask, email: str) -> FlaskClient:
    client = app.test_client()
    as_(client)
    page = client.get("/sign-in").get_data(as_text=True)
    answer = client.post(
        "/sign-in", data={"email": email, "password": PASSWORD, "csrf_token": csrf_token(page)}
    )
    assert answer.status_code == 302, answer.get_data(as_text=True)
    return client


def post(client: FlaskClient, path: str, **form: str) -> tuple[int, str]:
    as_(client)
    token = page_token(client, "/")
    as_(client)
    answer = client.post(path, data={"csrf_token": token, **form}, follow_redirects=True)
    return answer.status_code, answer.get_data(as_text=True)


def audits(db: Database, action: str) -> list[AuditEntry]:
    with db.transaction() as session:
        return list(
            session.scalars(
                select(AuditEntry).where(AuditEntry.action == action).order_by(AuditEntry.id)
            )
        )
