"""Meta's template and account events raise the existing alerts: a held template fires
`template_held` until Meta approves it again; a restricted account's identities are paused,
which fires `paused` with Meta's words. The evaluator's `now` passed in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import AlertEpisode
from jobs.alerts import AlertEvaluator

from ..conftest import T0
from ..factories import World, make_world
from ..meta import BUSINESS_ACCOUNT_ID, PHONE_NUMBER_ID, account_body, encode
from ..whatsapp_world import SECRET, deliver


@pytest.fixture
def world(db: Database) -> World:
    return make_world(
        db, account_id=PHONE_NUMBER_ID, app_secret=SECRET, business_account_id=BUSINESS_ACCOUNT_ID
    )


def evaluate(app: Flask, db: Database, at_minute: int) -> dict[str, AlertEpisode]:
    """Run the evaluator once; the open episodes by alert key."""
    evaluator = AlertEvaluator(db, app.config["RATCHET"])
    try:
        evaluator.run(T0 + timedelta(minutes=at_minute))
    finally:
        evaluator.close()
    with db.transaction() as session:
        return {
            episode.alert_key: episode
            for episode in session.scalars(
                select(AlertEpisode).where(AlertEpisode.cleared_at.is_(None))
            )
        }


def test_a_held_template_fires_its_alert_until_meta_approves_it_again(
    app: Flask, db: Database, world: World
) -> None:
    client: FlaskClient = app.test_client()
    key = f"template_held:{world.identity_id}"
    assert key not in evaluate(app, db, 1)
    assert deliver(client, encode(account_body("template_status_paused"))).status_code == 200
    firing = evaluate(app, db, 2)
    assert key in firing
    assert "template order_update (en_US) paused" in firing[key].summary
    assert deliver(client, encode(account_body("template_status_approved"))).status_code == 200
    assert key not in evaluate(app, db, 3)


def test_a_restricted_account_fires_the_paused_alert_with_metas_words(
    app: Flask, db: Database, world: World
) -> None:
    client = app.test_client()
    # Customer-initiated messaging restricted: the whole identity is paused.
    kinds = [{"restriction_type": "RESTRICTED_CUSTOMER_INITIATED_MESSAGING"}]
    body = account_body("account_restriction", restriction_info=kinds)
    assert deliver(client, encode(body)).status_code == 200
    firing = evaluate(app, db, 1)
    episode = firing[f"paused:{world.identity_id}"]
    assert "RESTRICTED_CUSTOMER_INITIATED_MESSAGING" in episode.fired_figures["reason"]
