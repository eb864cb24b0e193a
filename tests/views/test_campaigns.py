"""Campaigns: a send's template and campaign label, taken by the API, shown on the pages,
and filtering the dead letters, cancel and bulk requeue; search by what a person sees
(a number's last digits, a template's name, a campaign label, a key's beginning)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import Message
from app.repo.messages import NewMessage, create_message

from ..conftest import T0
from ..factories import World
from .dashboard_world import (
    NOW,
    Tenants,
    failed_message,
    make_staff,
    page_token,
    sign_in,
    use_clock,
)

ORDER = {"name": "order_update", "language": "en_US", "components": []}
PROMO = {"name": "black_friday", "language": "es_MX", "components": []}


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def queued(
    db: Database,
    world: World,
    *,
    template: dict[str, Any] | None = None,
    campaign: str | None = None,
    key: str | None = None,
    recipient: str = "15551234567",
) -> int:
    with db.transaction() as session:
        message, _ = create_message(
            session,
            NewMessage(
                tenant_id=world.tenant_id,
                identity_id=world.identity_id,
                recipient=recipient,
                lane="campaign",
                fingerprint="f" * 64,
                body_text=None if template else "hello",
                template=template,
                idempotency_key=key,
                campaign=campaign,
            ),
            T0,
        )
        return message.id


def labelled(db: Database, message_id: int, **values: Any) -> None:
    """Give a failed message (made by the shared helper) its campaign's columns."""
    with db.transaction() as session:
        row = session.get(Message, message_id)
        assert row is not None
        for name, value in values.items():
            setattr(row, name, value)


def ids_listed(page: str) -> set[int]:
    return {int(found) for found in re.findall(r'<tr id="dead-letter-(\d+)"', page)}


def test_the_api_takes_a_campaign_label_and_keeps_the_template_name_beside_it(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    api = app.test_client()
    response = api.post(
        "/v1/messages",
        json={
            "identity_id": tenants.acme.identity_id,
            "to": "15551230000",
            "template": ORDER,
            "campaign": "bf-2026",
        },
        headers={"Authorization": f"Bearer {tenants.acme.api_key}"},
    )
    assert response.status_code in (201, 202), response.get_data(as_text=True)
    assert response.get_json()["campaign"] == "bf-2026"
    with db.transaction() as session:
        row = session.scalars(select(Message)).one()
        assert (row.campaign, row.template_name, row.recipient_tail) == (
            "bf-2026",
            "order_update",
            "0000",
        )
    body = {"identity_id": tenants.acme.identity_id, "to": "1555", "text": "x"}
    too_long = api.post(
        "/v1/messages",
        json={**body, "campaign": "c" * 101},
        headers={"Authorization": f"Bearer {tenants.acme.api_key}"},
    )
    assert too_long.status_code == 400


def test_dead_letters_filter_by_template_campaign_and_key_prefix_and_show_them(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    promo = failed_message(db, tenants.acme, key="bf-0001", minute=1)
    labelled(db, promo, template_name="black_friday", campaign="bf-2026", template=PROMO)
    order = failed_message(db, tenants.acme, key="ord-0001", minute=2)
    labelled(db, order, template_name="order_update", template=ORDER)
    assert ids_listed(client.get("/dead-letters").get_data(as_text=True)) == {promo, order}
    by_template = client.get("/dead-letters?template=black_friday").get_data(as_text=True)
    assert ids_listed(by_template) == {promo}
    assert "template <code>black_friday</code> (es_MX)" in by_template
    assert "campaign <code>bf-2026</code>" in by_template
    assert ids_listed(client.get("/dead-letters?campaign=bf-2026").get_data(as_text=True)) == {
        promo
    }
    assert ids_listed(client.get("/dead-letters?key_prefix=ord-").get_data(as_text=True)) == {order}
    # A key prefix is a prefix, not a pattern: % matches only a literal %.
    assert ids_listed(client.get("/dead-letters?key_prefix=%25").get_data(as_text=True)) == set()


def test_a_bulk_requeue_by_campaign_touches_only_that_campaigns_dead_letters(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    promo = failed_message(db, tenants.acme, minute=1)
    labelled(db, promo, campaign="bf-2026")
    other = failed_message(db, tenants.acme, minute=2)
    labelled(db, other, campaign="summer")
    response = client.post(
        "/dead-letters/bulk-requeue",
        data={"campaign": "bf-2026", "csrf_token": page_token(client, "/dead-letters")},
    )
    assert response.status_code == 302, response.get_data(as_text=True)
    plan = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "The filters match 1" in plan and "campaign=bf-2026" in plan


def test_a_bulk_cancel_by_template_leaves_other_campaigns_queued(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    queued(db, tenants.acme, template=PROMO, recipient="15550000001")
    queued(db, tenants.acme, template=PROMO, recipient="15550000002")
    queued(db, tenants.acme, template=ORDER, recipient="15550000003")
    response = client.post(
        "/cancel/preview",
        data={
            "identity": str(tenants.acme.identity_id),
            "template": "black_friday",
            "csrf_token": page_token(client, "/cancel"),
        },
    )
    assert response.status_code == 302, response.get_data(as_text=True)
    plan = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "The filters match 2</strong>: 2 can be canceled" in plan
    assert "template=black_friday" in plan


def test_search_finds_a_number_by_its_last_digits_and_offers_a_choice_when_several_fit(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    one = queued(db, tenants.acme, recipient="15557770010")
    two = queued(db, tenants.acme, recipient="4915112340010")
    queued(db, tenants.acme, recipient="15557770011")
    listed = client.get("/search?q=0010")
    assert listed.status_code == 200  # two numbers end in 0010: a choice, not a guess
    page = listed.get_data(as_text=True)
    assert f"#{one}" in page and f"#{two}" in page
    assert "recipient&#39;s last digits" in page or "recipient's last digits" in page
    # Pasted as the dashboard shows it, with more digits: one fits, and it opens.
    single = client.get("/search", query_string={"q": "…12340010"})
    assert single.headers["Location"] == f"/messages/{two}"


def test_digits_with_leading_zeros_are_a_numbers_not_a_message_id(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = queued(db, tenants.acme, recipient="15559998888")
    assert client.get(f"/search?q={message_id}").headers["Location"] == f"/messages/{message_id}"
    assert client.get(f"/search?q=%23{message_id}").headers["Location"] == f"/messages/{message_id}"
    padded = client.get(f"/search?q={message_id:06d}")
    assert padded.headers.get("Location") != f"/messages/{message_id}"


def test_search_finds_a_template_a_campaign_and_a_keys_beginning(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    promo = queued(db, tenants.acme, template=PROMO, campaign="bf-2026", key="bf-2026-a1")
    queued(db, tenants.acme, template=PROMO, campaign="bf-2026", key="bf-2026-a2")
    theirs = queued(db, tenants.other, template=PROMO, campaign="bf-2026", key="bf-2026-zz")
    for query in ("black_friday", "bf-2026", "bf-20"):
        page = client.get("/search", query_string={"q": query}).get_data(as_text=True)
        assert f"#{promo}" in page and f"#{theirs}" not in page, query
        assert "2 messages match" in page, query
    assert client.get("/search?q=bf-2026-a1").headers["Location"] == f"/messages/{promo}"
    assert NOW  # the dashboard's clock is set by the fixture
