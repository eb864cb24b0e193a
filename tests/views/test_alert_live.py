"""The banner's figures now beside the ones the alert fired with."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.repo.cancels import cancel_message
from app.repo.identities import pause_identity, resume_identity
from jobs.alerts import AlertEvaluator

from ..factories import make_message
from .dashboard_world import NOW, Tenants, make_staff, sign_in, use_clock


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def evaluate(app: Flask, db: Database) -> None:
    config = dataclasses.replace(app.config["RATCHET"], stuck_after=60.0)
    evaluator = AlertEvaluator(db, config)
    evaluator.run(NOW)
    evaluator.close()


def banner(client: FlaskClient) -> str:
    return client.get("/alerts/banner", headers={"HX-Request": "true"}).get_data(as_text=True)


def test_the_banner_shows_a_stuck_lanes_figures_now_beside_those_it_fired_with(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    clock = use_clock(app)
    message_id = make_message(db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=5))
    evaluate(app, db)
    fired = banner(client)
    assert "the oldest waiting 300 s" in fired  # the summary, as it fired
    assert "Now:\n1 due, the oldest waiting 5 m" in fired
    clock.now = NOW + timedelta(minutes=2)
    later = banner(client)
    assert "the oldest waiting 300 s" in later
    assert "1 due, the oldest waiting 7 m" in later
    with db.transaction() as session:
        cancel_message(session, message_id, NOW, actor="ops", reason="mistake")
    assert "nothing due (clears at the next evaluation)" in banner(client)
    assert "Now:" in client.get("/alerts").get_data(as_text=True)


def test_the_banner_says_whether_a_paused_identity_is_still_paused(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    use_clock(app)
    with db.transaction() as session:
        pause_identity(session, tenants.acme.identity_id, "token expired", NOW)
    evaluate(app, db)
    assert "still paused" in banner(client)
    with db.transaction() as session:
        resume_identity(session, tenants.acme.identity_id, NOW)
    assert "resumed (clears at the next evaluation)" in banner(client)
