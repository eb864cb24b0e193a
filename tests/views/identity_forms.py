"""The identities page's forms as the tests post them: an operator and an admin of the first
tenant, a form posted as the page would, the audit rows the actions wrote, and an
identity's row read fresh."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Identity

from .dashboard_world import (
    Tenants,
    client_for,
    page_token,
)

__all__ = ["admin", "operator"]


@pytest.fixture
def operator(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    return client_for(app, db, "ops@acme.test", "operator", tenants.acme.tenant_id)


@pytest.fixture
def admin(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    return client_for(app, db, "admin@acme.test", "admin", tenants.acme.tenant_id)


def post(client: FlaskClient, path: str, **form: str) -> str:
    """Post a form as the page would, follow the redirect back, return the page."""
    token = page_token(client, "/identities")
    response = client.post(path, data={"csrf_token": token, **form}, follow_redirects=True)
    assert response.status_code == 200, response.status_code
    return response.get_data(as_text=True)


def audit_rows(db: Database, action: str | None = None) -> list[AuditEntry]:
    with db.transaction() as session:
        # Sign-ins are audited too; these tests count what the identity actions wrote.
        query = (
            select(AuditEntry)
            .where(AuditEntry.action.not_in(["staff.sign_in", "staff.sign_in_failed"]))
            .order_by(AuditEntry.id)
        )
        if action:
            query = query.where(AuditEntry.action == action)
        return list(session.scalars(query))


def identity_row(db: Database, identity_id: int) -> Identity:
    with db.transaction() as session:
        found = session.get(Identity, identity_id, populate_existing=True)
        assert found is not None
        session.expunge(found)
        return found
