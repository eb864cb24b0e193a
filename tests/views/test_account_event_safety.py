"""Meta's account events act only where they may: a business account belongs to one tenant
(the identities page, the CLI's repository call and the learning path refuse another's),
an event acts on and is shown to the identities whose own app secret verified it, template
events apply in Meta's order, and a signed value no column can hold is kept, never a 500."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from app.crypto import SecretBox
from app.db import Database
from app.models import Identity, ProviderEvent, TemplateHold
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.failures import record_retry
from app.repo.identities import BusinessAccountError, update_identity
from app.repo.provider_events import learn_business_accounts
from tests.conftest import SECRET_KEY, T0
from tests.meta import BUSINESS_ACCOUNT_ID, account_body, encode, sign

from ..factories import message as row
from .account_events import LEASE, claimable_ids, kinds, templated
from .dashboard_world import Tenants, make_staff, make_tenants, page_token, sign_in, use_clock

pytestmark = pytest.mark.usefixtures("one_user_per_request")

EVIL = "attacker-chosen-secret"
VICTIM = "app-secret-acme"  # both tenants' identities are made with it
CUSTOMER = [{"restriction_type": "RESTRICTED_CUSTOMER_INITIATED_MESSAGING"}]


@pytest.fixture
def tenants(db: Database) -> Tenants:
    world = make_tenants(db)
    with db.transaction() as session:  # the victim's business account, set by the platform
        update_identity(
            session,
            SecretBox(SECRET_KEY),
            world.acme.identity_id,
            business_account_id=BUSINESS_ACCOUNT_ID,
            app_secret=VICTIM,
            now=T0,
        )
        update_identity(
            session, SecretBox(SECRET_KEY), world.other.identity_id, app_secret=EVIL, now=T0
        )
    return world


def held_before_the_fix(db: Database, tenants: Tenants) -> None:
    """Another tenant's identity naming the victim's account, as could be stored before a
    business account was tied to one tenant (written directly: nothing allows it now)."""
    with db.transaction() as session:
        session.execute(
            update(Identity)
            .where(Identity.id == tenants.other.identity_id)
            .values(business_account_id=BUSINESS_ACCOUNT_ID)
        )


def admin_of_other(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "admin@other.test", "admin", tenants.other.tenant_id)
    client = app.test_client()
    sign_in(client, "admin@other.test")
    return client


def post(app: Flask, body: dict[str, Any], secret: str) -> dict[str, Any]:
    raw = encode(body)
    response = app.test_client().post(
        "/webhooks/whatsapp",
        data=raw,
        headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, secret)},
    )
    assert response.status_code == 200, response.get_json()
    answer: dict[str, Any] = response.get_json()
    return answer


def identity(db: Database, identity_id: int) -> Identity:
    with db.transaction() as session:
        found = session.get(Identity, identity_id, populate_existing=True)
        assert found is not None
        return found


# 1. A business account belongs to one tenant ------------------------------------------------


def test_the_identities_page_refuses_another_tenants_business_account(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    client = admin_of_other(app, db, tenants)
    iid = tenants.other.identity_id
    token = page_token(client, "/identities")
    page = client.post(
        f"/identities/{iid}/business-account",
        data={"csrf_token": token, "business_account_id": BUSINESS_ACCOUNT_ID},
        follow_redirects=True,
    ).get_data(as_text=True)
    assert "belongs to another tenant" in page
    assert identity(db, iid).business_account_id is None
    # The forged delivery such an admin would sign is refused: no identity it names verifies.
    raw = encode(account_body("account_restriction", restriction_info=CUSTOMER))
    refused = app.test_client().post(
        "/webhooks/whatsapp",
        data=raw,
        headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, EVIL)},
    )
    assert refused.status_code == 401
    assert identity(db, tenants.acme.identity_id).paused_at is None


def test_the_repository_the_cli_calls_refuses_it_and_the_owner_may_reuse_it(
    db: Database, tenants: Tenants
) -> None:
    box = SecretBox(SECRET_KEY)
    with (
        pytest.raises(BusinessAccountError, match="another tenant"),
        db.transaction() as session,
    ):
        update_identity(
            session,
            box,
            tenants.other.identity_id,
            business_account_id=BUSINESS_ACCOUNT_ID,
            now=T0,
        )
    with db.transaction() as session:  # the tenant that holds it may set it again
        update_identity(
            session,
            box,
            tenants.acme.identity_id,
            business_account_id=BUSINESS_ACCOUNT_ID,
            now=T0,
        )


def test_learning_never_attaches_another_tenants_business_account(
    db: Database, tenants: Tenants
) -> None:
    with db.transaction() as session:
        assert (
            learn_business_accounts(session, {tenants.other.identity_id: BUSINESS_ACCOUNT_ID}) == []
        )
        assert learn_business_accounts(session, {tenants.other.identity_id: "4242"}) == [
            tenants.other.identity_id
        ]
    assert identity(db, tenants.other.identity_id).business_account_id == "4242"


# 1b, 1c. Acted on and shown only for the identities whose secret verified it ----------------


def test_an_event_acts_only_for_identities_whose_own_secret_verified_it(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    held_before_the_fix(db, tenants)
    victims = templated(db, tenants.acme)
    post(app, account_body("account_restriction", restriction_info=CUSTOMER), EVIL)
    post(app, account_body("template_status_rejected"), EVIL)
    assert identity(db, tenants.acme.identity_id).paused_at is None
    assert identity(db, tenants.other.identity_id).paused_by == "meta"  # its own, verified
    assert row(db, victims).status == "queued"
    assert "template_held" not in kinds(db, victims)
    assert claimable_ids(db, tenants.acme) == [victims]  # no hold on the shared account


def test_an_identity_is_shown_only_the_events_its_own_secret_verified(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    held_before_the_fix(db, tenants)
    secret_name = "acme_secret_campaign"
    post(app, account_body("template_status_paused", message_template_name=secret_name), VICTIM)
    post(app, account_body("template_status_paused", message_template_name="other_own"), EVIL)
    client = admin_of_other(app, db, tenants)
    page = client.get(f"/identities/{tenants.other.identity_id}/events").get_data(as_text=True)
    assert "other_own" in page
    assert secret_name not in page


# 2. Template events in Meta's order -------------------------------------------------------


def at_time(name: str, seconds: int) -> dict[str, Any]:
    body = copy.deepcopy(account_body(name))
    body["entry"][0]["time"] = 1_800_000_000 + seconds
    return body


@pytest.mark.parametrize("late", ["template_status_paused", "template_status_rejected"])
def test_an_older_template_event_after_a_newer_one_does_nothing(
    app: Flask, db: Database, tenants: Tenants, late: str
) -> None:
    message_id = templated(db, tenants.acme)
    post(app, at_time("template_status_paused", 10), VICTIM)
    post(app, at_time("template_status_approved", 30), VICTIM)
    answer = post(app, at_time(late, 20), VICTIM)  # Meta's retry of an earlier event
    assert answer["actions"] == ["older than the template's newest event; nothing done"]
    assert row(db, message_id).status == "queued"
    assert claimable_ids(db, tenants.acme) == [message_id]
    # A newer one still applies.
    answer = post(app, at_time("template_status_paused", 40), VICTIM)
    assert "held until Meta approves it again" in answer["actions"][0]
    assert claimable_ids(db, tenants.acme) == []
    with db.transaction() as session:
        active = session.scalars(select(TemplateHold).where(TemplateHold.released_at.is_(None)))
        assert [hold.state for hold in active] == ["PAUSED"]


# 4. Values no column holds -----------------------------------------------------------------


def test_a_nul_or_an_over_long_value_in_a_signed_event_is_kept_not_a_500(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    message_id = templated(db, tenants.acme)
    answer = post(
        app, account_body("template_status_paused", message_template_name="order\x00update"), VICTIM
    )
    assert answer["kept"] == 1
    assert "not one Meta gives" in answer["actions"][0]
    long_name = "n" * 600
    post(app, account_body("template_status_paused", message_template_name=long_name), VICTIM)
    body = account_body("account_restriction", account=BUSINESS_ACCOUNT_ID + "\x00")
    post(app, body, VICTIM)  # an unknown account: checked against every secret, kept
    with db.transaction() as session:
        names = list(
            session.scalars(select(ProviderEvent.template_name).order_by(ProviderEvent.id))
        )
        accounts = list(session.scalars(select(ProviderEvent.business_account_id)))
    assert names[:2] == ["order\ufffdupdate", "n" * 512]
    assert BUSINESS_ACCOUNT_ID + "\ufffd" in accounts
    assert claimable_ids(db, tenants.acme) == [message_id]  # nothing held by either


# 6. A rejected template fails what waits for a retry ----------------------------------------


def test_rejected_fails_a_message_waiting_for_its_retry_and_keeps_a_leased_one(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    waiting, leased = templated(db, tenants.acme), templated(db, tenants.acme)
    with db.transaction() as session:  # tried once, a transient error: retry in a minute
        claim = claim_message(session, waiting, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", T0)
        assert record_retry(
            session,
            claim,
            T0 + timedelta(minutes=1),
            failure_class="transient",
            error={"code": 131000},
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
    with db.transaction() as session:  # claimed now (a lease far ahead): maybe in flight
        assert claim_message(session, leased, T0 + timedelta(days=3650), LEASE) is not None
    assert row(db, waiting).status == row(db, leased).status == "sending"
    answer = post(app, account_body("template_status_rejected"), VICTIM)
    assert "1 waiting messages failed, 1 others held" in answer["actions"][0]
    failed = row(db, waiting)
    assert failed.status == "failed" and failed.failure_class == "needs_human"
    assert row(db, leased).status == "sending"


def test_a_message_sent_while_its_template_is_rejected_says_why_it_waits(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    post(app, account_body("template_status_rejected"), VICTIM)
    response = app.test_client().post(
        "/v1/messages",
        json={
            "identity_id": tenants.acme.identity_id,
            "to": "+15557654321",
            "template": {"name": "order_update", "language": "en_US"},
        },
        headers={"Authorization": f"Bearer {tenants.acme.api_key}"},
    )
    assert response.status_code in (200, 201, 202), response.get_json()
    message_id = response.get_json()["id"]
    assert claimable_ids(db, tenants.acme) == []
    assert kinds(db, message_id)[-1] == "template_held"


def test_the_cli_refuses_another_tenants_business_account(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    update = ["identity", "update", str(tenants.other.identity_id)]
    result = app.test_cli_runner().invoke(args=[*update, "--business-account", BUSINESS_ACCOUNT_ID])
    assert result.exit_code != 0
    assert "belongs to another tenant's identity; nothing was changed" in result.output
    assert identity(db, tenants.other.identity_id).business_account_id is None
