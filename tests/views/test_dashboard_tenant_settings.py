"""The tenants page: platform admins set each tenant's limits and retention (audited);
a tenant's own admin cannot see or change it; bad values change nothing."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.models import Tenant

from .dashboard_world import Tenants, make_staff, use_clock
from .staff_sessions import as_, audits, post, signed_in


@pytest.fixture
def platform_admin(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "root@ratchet.test", "admin", None)
    return signed_in(app, "root@ratchet.test")


def settings(db: Database, tenant_id: int) -> tuple[float | None, int | None, int]:
    with db.transaction() as session:
        row = session.get(Tenant, tenant_id, populate_existing=True)
        assert row is not None
        return row.max_requests_per_second, row.max_waiting, row.retention_days


def test_a_platform_admin_sets_a_tenants_limits_and_retention(
    platform_admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    as_(platform_admin)
    page = platform_admin.get("/tenants").get_data(as_text=True)
    assert 'id="tenant-' in page and "Save acme" in page
    status, answer = post(
        platform_admin,
        f"/tenants/{tenants.acme.tenant_id}/settings",
        max_requests_per_second="12.5",
        max_waiting="1000",
        retention_days="14",
    )
    assert status == 200 and "settings saved" in answer
    assert settings(db, tenants.acme.tenant_id) == (12.5, 1000, 14)
    assert settings(db, tenants.other.tenant_id) == (None, None, 30)
    assert [a.target for a in audits(db, "tenant_settings")] == [f"tenant:{tenants.acme.tenant_id}"]
    # Empty limits lift them.
    post(
        platform_admin,
        f"/tenants/{tenants.acme.tenant_id}/settings",
        max_requests_per_second="",
        max_waiting="",
        retention_days="14",
    )
    assert settings(db, tenants.acme.tenant_id) == (None, None, 14)


@pytest.mark.parametrize(
    "form",
    [
        {"max_requests_per_second": "fast", "max_waiting": "", "retention_days": "30"},
        {"max_requests_per_second": "0", "max_waiting": "", "retention_days": "30"},
        {"max_requests_per_second": "", "max_waiting": "-1", "retention_days": "30"},
        {"max_requests_per_second": "", "max_waiting": "", "retention_days": ""},
        {"max_requests_per_second": "", "max_waiting": "", "retention_days": "0"},
    ],
)
def test_bad_values_are_refused_and_change_nothing(
    platform_admin: FlaskClient, db: Database, tenants: Tenants, form: dict[str, str]
) -> None:
    status, answer = post(platform_admin, f"/tenants/{tenants.acme.tenant_id}/settings", **form)
    assert status == 200 and "Not changed" in answer
    assert settings(db, tenants.acme.tenant_id) == (None, None, 30)


def test_a_tenants_own_admin_cannot_open_or_post_the_page(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    use_clock(app)
    make_staff(db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    client = signed_in(app, "admin@acme.test")
    as_(client)
    assert client.get("/tenants").status_code == 403
    status, _ = post(
        client,
        f"/tenants/{tenants.acme.tenant_id}/settings",
        max_requests_per_second="1000",
        max_waiting="",
        retention_days="3650",
    )
    assert status == 403
    assert settings(db, tenants.acme.tenant_id) == (None, None, 30)
