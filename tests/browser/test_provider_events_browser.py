"""Meta's events for an identity in real Chromium: a support person goes from the
identities page (which shows the number's quality and the held template) to the identity's
events, reads what Ratchet did, opens a verbatim delivery and filters by kind."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import Page, expect

from app.clock import utcnow
from app.crypto import SecretBox
from app.repo.identities import update_identity

from ..conftest import SECRET_KEY, T0
from ..meta import BUSINESS_ACCOUNT_ID, account_body, encode, sign
from ..views.dashboard_world import Tenants, make_staff, make_tenants
from .conftest import Served, axe_violations, screenshot
from .dashboard_steps import follow, sign_in

pytestmark = pytest.mark.slow

SECRET = "app-secret-acme"  # make_tenants' acme identity


@pytest.fixture
def tenants(served: Served) -> Tenants:
    world = make_tenants(served.db)
    with served.db.transaction() as session:
        update_identity(
            session,
            SecretBox(SECRET_KEY),
            world.acme.identity_id,
            business_account_id=BUSINESS_ACCOUNT_ID,
            now=T0,
        )
    make_staff(served.db, "look@acme.test", "viewer", world.acme.tenant_id)
    return world


def deliver(served: Served, name: str) -> None:
    raw = encode(account_body(name))
    response = served.app.test_client().post(
        "/webhooks/whatsapp",
        data=raw,
        headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)},
    )
    assert response.status_code == 200, response.get_json()


def test_a_support_person_reads_metas_events_for_an_identity_and_filters_them(
    page: Page, served: Served, tenants: Tenants
) -> None:
    for name in (
        "phone_number_quality_update",
        "template_quality_update",
        "template_status_paused",
        "account_restriction",
    ):
        deliver(served, name)
    # The webhook keeps its own (real) clock; the dashboard's reads the same minute.
    served.clock.now = utcnow() + timedelta(minutes=1)
    sign_in(page, served, "look@acme.test")

    follow(page, page.get_by_role("link", name="Identities"))
    row = page.locator(f"#identity-{tenants.acme.identity_id}")
    expect(row).to_contain_text("number quality DOWNGRADE, limit TIER_250 (was TIER_1K)")
    expect(row).to_contain_text("campaign reach, last 24 h and waiting: 0 unique of 250")
    expect(row).to_contain_text("template order_update (en_US) paused")
    expect(row).to_contain_text("Meta restricted the account")
    screenshot(page, "31-identities-meta-news")

    follow(page, row.get_by_role("link", name="Meta's events"))
    expect(
        page.get_by_role("heading", name=f"Meta's events for identity #{tenants.acme.identity_id}")
    ).to_be_visible()
    rows = page.locator("#provider-events tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.first).to_contain_text("ACCOUNT_RESTRICTION")
    expect(rows.first).to_contain_text(
        f"campaign lane of identities {tenants.acme.identity_id} paused"
    )
    expect(rows.nth(1)).to_contain_text("waiting messages held until Meta approves it again")
    rows.first.get_by_text("delivery").click()
    expect(rows.first.locator("pre")).to_contain_text(
        '"restriction_type":"RESTRICTED_BIZ_INITIATED_MESSAGING"'
    )
    screenshot(page, "31-provider-events")
    assert axe_violations(page) == []  # the verbatim delivery's box included

    page.get_by_label("Kind").select_option("message_template_status_update")
    follow(page, page.get_by_role("button", name="Filter"))
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("PAUSED")
    screenshot(page, "31-provider-events-filtered")
