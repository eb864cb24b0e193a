"""A pause stops new claims only: a message whose call is already in flight when its
identity is paused is not shown as held ("nothing is sent"), since the call may still reach
the provider; its lease is counted down as for any call in flight. (Found by review.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.models import Message
from app.repo.acceptance import record_accepted
from app.repo.attempts import finish_attempt, start_attempt
from app.repo.claims import claim_message
from app.repo.identities import pause_identity

from ..factories import make_message
from .dashboard_world import LEASE, NOW, Tenants, client_for


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    return client_for(app, db, "ops@acme.test", "operator", tenants.acme.tenant_id)


def status_widget(client: FlaskClient, message_id: int) -> tuple[str, str]:
    page = client.get(f"/messages/{message_id}").get_data(as_text=True)
    return page.split('id="status-widget"', 1)[1].split("</section>", 1)[0], page


def test_a_message_in_flight_when_its_identity_is_paused_is_not_shown_held(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    claimed_at = NOW - timedelta(seconds=2)
    message_id = make_message(db, tenants.acme, now=NOW - timedelta(minutes=1))
    with db.transaction() as session:
        claim = claim_message(session, message_id, claimed_at, LEASE)
        assert claim is not None
        start_attempt(session, claim, f"pk-{message_id}", claimed_at)  # the call begins
    with db.transaction() as session:  # an operator pauses the identity during the call
        pause_identity(session, tenants.acme.identity_id, "token expired", NOW)

    widget, page = status_widget(client, message_id)
    assert "held (identity paused)" not in widget
    assert "Nothing is sent until it resumes" not in widget
    assert "in flight until" in widget
    assert "State: held" not in page  # the ticket summary

    # The call in flight completes: the provider accepted it, paused or not.
    with db.transaction() as session:
        finish_attempt(session, claim, NOW, "accepted", provider_message_id="wamid.FLIGHT")
        record_accepted(session, claim, "wamid.FLIGHT", NOW, unknown_attempts=0, had_unknown=False)
    with db.transaction() as session:
        sent = session.get(Message, message_id)
        assert sent is not None and sent.status == "sent"


def test_a_waiting_message_of_a_paused_identity_is_shown_held(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = make_message(db, tenants.acme, now=NOW - timedelta(minutes=1))
    with db.transaction() as session:
        pause_identity(session, tenants.acme.identity_id, "token expired", NOW)

    widget, page = status_widget(client, message_id)
    assert "held (identity paused)" in widget
    assert "State: held (identity paused), nothing is sent until it resumes" in page
