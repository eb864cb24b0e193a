"""What Ratchet does with Meta's account and template events, end to end through the signed
webhook: a paused, disabled or rejected template holds the waiting messages that use it
(rejected ends the queued ones failed), approved releases them; a restricted or disabled
account pauses its identities with Meta's words; quality changes reach the identities page."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import Identity, ProviderEvent
from app.repo.claims import claim_message
from app.repo.identity_page import identity_rows
from app.repo.messages import NewMessage, create_message

from ..conftest import T0
from ..factories import World, make_message, make_world
from ..factories import message as row
from ..meta import BUSINESS_ACCOUNT_ID, PHONE_NUMBER_ID, account_body, encode
from ..whatsapp_world import SECRET, deliver
from .account_events import LEASE, NOW, _Undo, claimable_ids, kinds, templated


@pytest.fixture
def world(db: Database) -> World:
    return make_world(
        db, account_id=PHONE_NUMBER_ID, app_secret=SECRET, business_account_id=BUSINESS_ACCOUNT_ID
    )


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def send_event(client: FlaskClient, name: str, **value: object) -> dict[str, object]:
    response = deliver(client, encode(account_body(name, **value)))
    assert response.status_code == 200, response.get_json()
    answer: dict[str, object] = response.get_json()
    return answer


def test_a_paused_template_holds_its_waiting_messages_and_approved_releases_them(
    client: FlaskClient, db: Database, world: World
) -> None:
    held = [templated(db, world), templated(db, world)]
    other_language = templated(db, world, {"name": "order_update", "language": "es"})
    text = make_message(db, world, recipient="15557654321")
    assert claimable_ids(db, world) == sorted([*held, other_language, text])

    answer = send_event(client, "template_status_paused")
    assert answer["actions"] == [
        "template order_update (en_US) paused: 2 waiting messages held until Meta approves it again"
    ]
    assert claimable_ids(db, world) == sorted([other_language, text])
    try:  # a single message's claim is held too
        with db.transaction() as session:
            assert claim_message(session, held[0], NOW, LEASE) is None
            assert claim_message(session, text, NOW, LEASE) is not None
            raise _Undo
    except _Undo:
        pass
    assert kinds(db, held[0])[-1] == "template_held"
    assert "template_held" not in kinds(db, text)

    answer = send_event(client, "template_status_approved")
    assert answer["actions"] == [
        "template order_update (en_US) approved: 2 waiting messages due again"
    ]
    assert claimable_ids(db, world) == sorted([*held, other_language, text])
    assert kinds(db, held[1])[-1] == "template_released"


def test_a_rejected_template_fails_its_queued_messages_with_metas_reason(
    client: FlaskClient, db: Database, world: World
) -> None:
    queued = templated(db, world)
    answer = send_event(client, "template_status_rejected")
    assert answer["actions"] == [
        "template order_update (en_US) rejected (INVALID_FORMAT): 1 waiting messages failed, "
        "0 others held"
    ]
    failed = row(db, queued)
    assert (failed.status, failed.failure_class) == ("failed", "needs_human")
    assert failed.last_error is not None
    assert failed.last_error["message"] == "INVALID_FORMAT"
    assert failed.last_error["title"] == "Meta rejected template order_update (en_US)"
    # A message queued after the rejection waits (held), never sent into a 132001.
    later = templated(db, world)
    assert later not in claimable_ids(db, world)


def restriction(*kinds: str) -> list[dict[str, str]]:
    return [{"restriction_type": kind, "expiration": "2026-12-20"} for kind in kinds]


def test_restricted_business_initiated_messaging_pauses_the_campaign_lane_only(
    client: FlaskClient, db: Database, world: World
) -> None:
    kinds = ("RESTRICTED_BIZ_INITIATED_MESSAGING", "RESTRICTED_ADD_PHONE_NUMBER_ACTION")
    answer = send_event(client, "account_restriction", restriction_info=restriction(*kinds))
    words = f"Meta restricted the account: {', '.join(kinds)}"
    assert answer["actions"] == [
        f"{words}: the campaign lane of identities {world.identity_id} paused"
    ]
    with db.transaction() as session:
        identity = session.get(Identity, world.identity_id, populate_existing=True)
        assert identity is not None and identity.paused_at is None  # replies still go
        assert identity.campaign_paused_by == "meta"
        assert identity.campaign_paused_reason == words
        (event,) = session.scalars(select(ProviderEvent)).all()
        assert event.action == answer["actions"][0]  # type: ignore[index]


def test_restricted_customer_initiated_messaging_pauses_the_identity_with_metas_words(
    client: FlaskClient, db: Database, world: World
) -> None:
    kinds = ("RESTRICTED_BIZ_INITIATED_MESSAGING", "RESTRICTED_CUSTOMER_INITIATED_MESSAGING")
    answer = send_event(client, "account_restriction", restriction_info=restriction(*kinds))
    words = f"Meta restricted the account: {', '.join(kinds)}"
    assert answer["actions"] == [f"{words}: identity {world.identity_id} paused"]
    with db.transaction() as session:
        identity = session.get(Identity, world.identity_id, populate_existing=True)
        assert identity is not None and identity.paused_by == "meta"
        assert identity.paused_reason == words


@pytest.mark.parametrize(
    "kinds", [("RESTRICTED_ADD_PHONE_NUMBER_ACTION",), ("SOMETHING_META_ADDS_LATER",), ()]
)
def test_a_restriction_of_nothing_ratchet_sends_is_kept_and_pauses_nothing(
    client: FlaskClient, db: Database, world: World, kinds: tuple[str, ...]
) -> None:
    answer = send_event(client, "account_restriction", restriction_info=restriction(*kinds))
    assert "kept, no identity paused" in answer["actions"][0]  # type: ignore[index]
    with db.transaction() as session:
        identity = session.get(Identity, world.identity_id, populate_existing=True)
        assert identity is not None and identity.paused_at is None
        assert identity.campaign_paused_at is None


def test_a_disabled_account_pauses_and_a_reinstatement_leaves_the_resume_to_the_operator(
    client: FlaskClient, db: Database, world: World
) -> None:
    answer = send_event(client, "account_disabled")
    assert "Meta disabled the account: DISABLE on December 4, 2026" in answer["actions"][0]  # type: ignore[index]
    answer = send_event(
        client,
        "account_disabled",
        ban_info={"waba_ban_state": "REINSTATE", "waba_ban_date": "December 5, 2026"},
    )
    assert answer["actions"] == ["kept; nothing for Ratchet to do"]
    with db.transaction() as session:
        identity = session.get(Identity, world.identity_id, populate_existing=True)
        assert identity is not None and identity.paused_at is not None  # still paused


def test_quality_and_limit_changes_and_held_templates_reach_the_identities_page(
    client: FlaskClient, db: Database, world: World
) -> None:
    send_event(client, "phone_number_quality_update")
    send_event(client, "template_quality_update")
    send_event(client, "template_status_paused")
    with db.transaction() as session:
        (shown,) = identity_rows(session, None, NOW)
    assert shown.news is not None and shown.news.number is not None
    assert shown.news.number.event == "DOWNGRADE"
    assert shown.news.number.value["current_limit"] == "TIER_250"
    assert [(c.template, c.event) for c in shown.news.templates] == [
        ("order_update (en_US)", "YELLOW")
    ]
    assert [(h.template_name, h.state) for h in shown.news.holds] == [("order_update", "PAUSED")]


def test_a_held_or_rejected_message_page_links_to_metas_template_events(
    app: Flask, client: FlaskClient, db: Database, world: World
) -> None:
    from .dashboard_world import make_staff, sign_in, use_clock

    held = templated(db, world)
    send_event(client, "template_status_paused")
    rejected = templated(db, world, {"name": "order_update", "language": "en_US"})
    send_event(client, "template_status_rejected")
    use_clock(app)
    make_staff(db, "look@acme.test", "viewer", world.tenant_id)
    staff = app.test_client()
    sign_in(staff, "look@acme.test")
    link = f"/identities/{world.identity_id}/events?kind=message_template_status_update"
    for message_id in (held, rejected):
        page = staff.get(f"/messages/{message_id}").get_data(as_text=True)
        assert "paused template order_update (en_US)" in page or "rejected" in page
        assert link in page
    failed_page = staff.get(f"/messages/{rejected}").get_data(as_text=True)
    assert "Meta's template events for this identity" in failed_page


def campaign(db: Database, world: World, recipients: range) -> None:
    with db.transaction() as session:
        for n in recipients:
            create_message(
                session,
                NewMessage(
                    tenant_id=world.tenant_id,
                    identity_id=world.identity_id,
                    recipient=f"1555{n:07d}",
                    lane="campaign",
                    fingerprint="f" * 64,
                    body_text="spring sale",
                ),
                T0,
            )


def test_a_campaign_that_would_pass_the_numbers_messaging_limit_is_flagged_before_it_is_sent(
    client: FlaskClient, db: Database, world: World
) -> None:
    send_event(client, "phone_number_quality_update", current_limit="TIER_50")
    campaign(db, world, range(50))
    make_message(db, world, recipient="15550000000", lane="campaign")  # the same person again
    with db.transaction() as session:
        (shown,) = identity_rows(session, None, NOW)
    assert shown.news is not None
    assert (shown.news.reach, shown.news.limit, shown.news.over_limit) == (50, 50, False)
    campaign(db, world, range(50, 51))
    with db.transaction() as session:
        (shown,) = identity_rows(session, None, NOW)
    assert shown.news is not None
    assert (shown.news.reach, shown.news.over_limit) == (51, True)
