"""A `failed` the provider reports after `delivered` or `read` is refused by the guard (the
phone showed it), and still shown: on the message's page and in its ticket summary as
"the provider later reported: code, words", and counted in `/metrics`."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database

from ..conftest import METRICS_AUTH, at
from ..factories import message
from ..meta import encode, sign, status, status_body
from ..whatsapp_world import sent_message
from .dashboard_world import Tenants, make_staff, sign_in, use_clock

pytestmark = pytest.mark.usefixtures("one_user_per_request")

SECRET = "app-secret-acme"  # make_tenants' acme identity


def deliver(app: Flask, statuses: list[dict[str, object]]) -> None:
    raw = encode(status_body(statuses, "1000001"))
    response = app.test_client().post(
        "/webhooks/whatsapp",
        data=raw,
        headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)},
    )
    assert response.status_code == 200, response.get_json()


def late_failures_counted(app: Flask) -> float:
    text = app.test_client().get("/metrics", headers=METRICS_AUTH).get_data(as_text=True)
    found = re.search(r'^ratchet_late_failures_total\{provider="whatsapp"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def failed_status(wamid: str) -> dict[str, object]:
    item = status(wamid, "failed", at(30))
    item["errors"] = [
        {
            "code": 131026,
            "title": "Message undeliverable",
            "message": "Message undeliverable",
            "error_data": {"details": "Unable to deliver message."},
        }
    ]
    return item


def test_a_failed_after_delivered_is_refused_and_shown_on_the_page_the_ticket_and_metrics(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    message_id = sent_message(db, tenants.acme, "wamid.LATE")
    before = late_failures_counted(app)
    deliver(app, [status("wamid.LATE", "delivered", at(10))])
    deliver(app, [failed_status("wamid.LATE")])
    assert message(db, message_id).status == "delivered"  # the phone showed it: it stays
    assert late_failures_counted(app) == before + 1
    deliver(app, [failed_status("wamid.LATE")])  # Meta's redelivery: counted once
    assert late_failures_counted(app) == before + 1

    use_clock(app)
    make_staff(db, "look@acme.test", "viewer", tenants.acme.tenant_id)
    client: FlaskClient = app.test_client()
    sign_in(client, "look@acme.test")
    page = client.get(f"/messages/{message_id}").get_data(as_text=True)
    section = page.split('id="late-failures"', 1)[1].split("</section>", 1)[0]
    assert "the provider later reported: 131026, Message undeliverable" in section
    summary = page.split('id="ticket-summary"', 1)[1].split(">", 1)[1].split("</textarea>")[0]
    assert "State: delivered" in summary
    assert "Later: the provider later reported: 131026, Message undeliverable" in summary


def test_a_message_never_reported_failed_late_shows_no_such_section(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    message_id = sent_message(db, tenants.acme, "wamid.FINE")
    deliver(app, [status("wamid.FINE", "read", at(10))])
    use_clock(app)
    make_staff(db, "look@acme.test", "viewer", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "look@acme.test")
    page = client.get(f"/messages/{message_id}").get_data(as_text=True)
    assert 'id="late-failures"' not in page and "Later:" not in page
