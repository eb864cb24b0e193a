"""The identities page's settings for admins through the Flask client: rates, the token and
app secret, the base URL and the business account; bad values are refused with the
reason and change nothing, another tenant's identity cannot be changed, every change is
audited and no secret is shown."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.crypto import SecretBox
from app.db import Database
from app.repo.identities import reveal_secrets

from ..conftest import SECRET_KEY
from .dashboard_world import (
    NOW,
    Tenants,
    page_token,
    use_clock,
)
from .identity_forms import admin, audit_rows, identity_row, operator, post

__all__ = ["admin", "operator"]  # the fixtures, imported for these tests


def test_a_tenants_admin_cannot_change_another_tenants_identity(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    other = tenants.other.identity_id
    token = page_token(admin, "/identities")
    for action, form in (("credentials", {"token": "t"}), ("rates", {"reply_rate": "1"})):
        answer = admin.post(f"/identities/{other}/{action}", data={"csrf_token": token, **form})
        assert answer.status_code == 404
    assert identity_row(db, other).credentials_version == 0
    assert identity_row(db, other).reply_rate == 20
    assert audit_rows(db) == []


def test_an_admin_changes_the_rates_and_the_next_batch_uses_them(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    iid = tenants.acme.identity_id
    page = post(
        admin, f"/identities/{iid}/rates", reply_rate="30", campaign_rate="40", total_rate="75"
    )
    assert "reply rate, campaign rate, total rate changed" in page
    row = identity_row(db, iid)
    assert (row.reply_rate, row.campaign_rate, row.total_rate) == (30, 40, 75)
    (audit,) = audit_rows(db, "identity.update")
    assert audit.detail is not None
    assert audit.detail["rates"] == {"reply_rate": 30, "campaign_rate": 40, "total_rate": 75}


@pytest.mark.parametrize(
    ("form", "said"),
    [
        ({"reply_rate": "50", "campaign_rate": "40"}, "add up to more than the total rate"),
        ({"reply_rate": "fast"}, "is not a number"),
        ({"reply_rate": "nan"}, "must be a number up to"),
        ({"total_rate": "0"}, "rates must be above zero"),
    ],
)
def test_bad_rates_are_refused_with_the_reason_and_nothing_changes(
    admin: FlaskClient, db: Database, tenants: Tenants, form: dict[str, str], said: str
) -> None:
    iid = tenants.acme.identity_id
    page = post(admin, f"/identities/{iid}/rates", **form)
    assert f"Rates of identity {iid} not changed" in page and said in page
    row = identity_row(db, iid)
    assert (row.reply_rate, row.campaign_rate, row.total_rate) == (20, 10, 80)
    assert audit_rows(db) == []


def test_an_admin_replaces_the_token_which_bumps_the_credentials_version_and_is_never_shown(
    admin: FlaskClient, db: Database, tenants: Tenants, app: Flask
) -> None:
    iid = tenants.acme.identity_id
    later = NOW + timedelta(minutes=5)
    use_clock(app, later)
    page = post(admin, f"/identities/{iid}/credentials", token="EAAG-the-new-token-123")
    assert "new token stored (not shown again)" in page
    assert "EAAG-the-new-token-123" not in page
    assert "token set on 2026-11-30 12:15:00 UTC" in page
    # The app secret was not given: kept, and its date too.
    assert "app secret set on 2026-11-30 12:00:00 UTC" in page
    row = identity_row(db, iid)
    assert row.credentials_version == 1 and row.credentials_changed_at == later
    secrets = reveal_secrets(SecretBox(SECRET_KEY), row)
    assert secrets.token == "EAAG-the-new-token-123" and secrets.app_secret == "app-secret-acme"
    (audit,) = audit_rows(db, "identity.update")
    assert audit.detail == {"changed": ["token"], "via": "web"}
    assert "EAAG" not in str(audit.detail)


def test_an_admin_replaces_the_app_secret_alone(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    iid = tenants.acme.identity_id
    page = post(admin, f"/identities/{iid}/credentials", app_secret="new-meta-secret")
    assert "new app secret stored" in page and "new-meta-secret" not in page
    row = identity_row(db, iid)
    assert row.credentials_version == 1
    assert reveal_secrets(SecretBox(SECRET_KEY), row).app_secret == "new-meta-secret"


def test_an_empty_credentials_form_changes_nothing(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    page = post(admin, f"/identities/{tenants.acme.identity_id}/credentials", token=" ")
    assert "no token or secret given; nothing changed" in page
    assert identity_row(db, tenants.acme.identity_id).credentials_version == 0
    assert audit_rows(db) == []


def test_a_token_no_http_header_can_carry_is_refused_and_nothing_is_stored(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    iid = tenants.acme.identity_id
    page = post(admin, f"/identities/{iid}/credentials", token="EAAG-pasted\u200b-token")
    assert f"Identity {iid}: nothing changed" in page and "no HTTP header can carry" in page
    assert "EAAG" not in page
    row = identity_row(db, iid)
    assert row.credentials_version == 0
    assert reveal_secrets(SecretBox(SECRET_KEY), row).token != "EAAG-pasted\u200b-token"
    assert audit_rows(db) == []


def test_an_admin_sets_a_whatsapp_numbers_business_account_and_bad_ids_are_refused(
    admin: FlaskClient, db: Database, tenants: Tenants
) -> None:
    iid = tenants.acme.identity_id
    assert "business account not known yet" in admin.get("/identities").get_data(as_text=True)
    page = post(admin, f"/identities/{iid}/business-account", business_account_id="102290129")
    assert "business account 102290129 stored" in page
    assert identity_row(db, iid).business_account_id == "102290129"
    page = post(admin, f"/identities/{iid}/business-account", business_account_id="abc")
    assert "not a WhatsApp business account id" in page
    assert identity_row(db, iid).business_account_id == "102290129"
    assert f"/identities/{iid}/events" in admin.get("/identities").get_data(as_text=True)
    (audit,) = audit_rows(db, "identity.update")
    assert audit.detail == {"changed": ["business account id"], "via": "web"}
