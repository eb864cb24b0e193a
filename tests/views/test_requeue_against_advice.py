"""A requeue the advice says not to make ("Do not resend now") takes a second, deliberate
act: the advice is shown again beside a box to tick, and without the tick it is refused."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database

from .dashboard_world import (
    Tenants,
    failed_message,
    make_staff,
    page_token,
    sign_in,
    use_clock,
)

MARKETING_LIMIT = {
    "provider": "whatsapp",
    "code": 131049,
    "title": "This message was not delivered to maintain healthy ecosystem engagement.",
}


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def test_the_message_page_asks_a_second_act_before_a_requeue_against_the_advice(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme, failure_class="permanent", error=MARKETING_LIMIT)
    page = client.get(f"/messages/{message_id}").get_data(as_text=True)
    requeue = page[page.index('id="requeue"') :]
    assert "Requeue against the advice" in requeue
    assert 'class="primary">Requeue' not in requeue
    assert "The advice is: <strong>Do not resend now" in requeue
    token = page_token(client, f"/messages/{message_id}")
    unticked = client.post(
        f"/messages/{message_id}/requeue",
        data={"csrf_token": token, "cycle": "1"},
        headers={"HX-Request": "true"},
    ).get_data(as_text=True)
    assert "Not requeued: the advice is “Do not resend now" in unticked
    ticked = client.post(
        f"/messages/{message_id}/requeue",
        data={"csrf_token": token, "cycle": "1", "against_advice": "1"},
        headers={"HX-Request": "true"},
    ).get_data(as_text=True)
    assert "Requeued: cycle 2" in ticked


def test_the_dead_letter_row_asks_the_same(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme, failure_class="permanent", error=MARKETING_LIMIT)
    other = failed_message(db, tenants.acme, minute=1)  # a template error: plain requeue
    page = client.get("/dead-letters").get_data(as_text=True)
    row = page[page.index(f'id="dead-letter-{message_id}"') :]
    row = row[: row.index("</tr>")]
    assert "Requeue against the advice" in row and 'name="against_advice"' in row
    plain = page[page.index(f'id="dead-letter-{other}"') :]
    assert '<button type="submit" class="primary">Requeue</button>' in plain[: plain.index("</tr>")]
    token = page_token(client, "/dead-letters")
    refused = client.post(
        f"/dead-letters/{message_id}/requeue",
        data={"csrf_token": token, "cycle": "1"},
        headers={"HX-Request": "true"},
    ).get_data(as_text=True)
    assert "Not requeued: the advice is" in refused
    done = client.post(
        f"/dead-letters/{message_id}/requeue",
        data={"csrf_token": token, "cycle": "1", "against_advice": "1"},
        headers={"HX-Request": "true"},
    ).get_data(as_text=True)
    assert "Requeued: cycle 2" in done
