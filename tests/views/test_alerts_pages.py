"""The alerts on the dashboard: a banner on every page while one fires (within the staff
member's tenant), and the alerts page with what fires, the dwelling messages and history."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.lifecycle import Source, Status
from app.repo.transitions import apply_status
from jobs.alerts import AlertEvaluator

from ..factories import make_message
from .dashboard_world import (
    NOW,
    Tenants,
    make_staff,
    sent_message,
    sign_in,
    use_clock,
)


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def evaluate(app: Flask, db: Database, now: object, **settings: object) -> None:
    config = dataclasses.replace(app.config["RATCHET"], **settings)  # type: ignore[arg-type]
    evaluator = AlertEvaluator(db, config)
    evaluator.run(now)  # type: ignore[arg-type]
    evaluator.close()


def page(client: FlaskClient, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.get_data(as_text=True)


def test_every_page_shows_the_banner_while_an_alert_fires_and_none_once_it_clears(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = make_message(db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=5))
    for path in ("/", "/stuck", "/dead-letters", "/alerts", f"/messages/{message_id}"):
        assert 'class="alert-banner"' not in page(client, path)
    evaluate(app, db, NOW, stuck_after=60.0)
    for path in ("/", "/stuck", "/dead-letters", "/alerts", f"/messages/{message_id}"):
        html = page(client, path)
        assert 'class="alert-banner"' in html, path
        assert "1 alert firing" in html and "Queue stuck" in html
    # The banner's own refresh answers with the banner only.
    partial = client.get("/alerts/banner", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert partial.lstrip().startswith('<div id="alert-banner"') and "Queue stuck" in partial
    assert "<html" not in partial

    sent_message(db, tenants.acme, "wamid.progress", minute=12)  # a claim: progress resumes
    evaluate(app, db, NOW + timedelta(minutes=2, seconds=30), stuck_after=60.0)
    assert 'class="alert-banner"' not in page(client, "/")


def test_another_tenants_alert_is_not_in_the_banner(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_message(db, tenants.other, lane="campaign", now=NOW - timedelta(minutes=5))
    evaluate(app, db, NOW, stuck_after=60.0)
    assert 'class="alert-banner"' not in page(client, "/")
    assert "No alert is firing." in page(client, "/alerts")
    assert "No alert has fired yet." in page(client, "/alerts")


def test_the_alerts_page_lists_dwelling_messages_and_the_history_with_both_figures(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    dwelling = sent_message(db, tenants.acme, "wamid.never-delivered")
    later = NOW + timedelta(hours=3)
    use_clock(app, later)
    settings = {"alert_dwell_hours": 2.0, "stuck_after": 60.0}
    app.config["RATCHET"] = dataclasses.replace(app.config["RATCHET"], **settings)
    evaluate(app, db, later)
    html = page(client, "/alerts")
    assert "Sent, never delivered (over 2.0 h)" in html
    assert f"/messages/{dwelling}" in html and "#" + str(dwelling) in html
    assert "1 message sent more than 2 h ago and never delivered" in html
    assert "▲ firing" in html
    # Delivered at last: the episode clears and keeps both sets of figures.
    with db.transaction() as session:
        moved = apply_status(session, dwelling, Status.DELIVERED, Source.WEBHOOK, later)
        assert moved.applied
    evaluate(app, db, later + timedelta(minutes=1))
    html = page(client, "/alerts")
    assert "No alert is firing." in html and "▲ firing" not in html
    row = html[html.index("<h2>History</h2>") :]
    assert row.count("dwelling</dt><dd>1</dd>") == 1  # when it fired
    assert row.count("dwelling</dt><dd>0</dd>") == 1  # when it cleared
