"""One-click requeue from the dashboard: it answers in place, never double-texts, and says
why when it refuses (the provider may hold it, a stale page, not failed, a viewer)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from redis import Redis
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Message
from app.repo.claims import claim_message
from app.repo.failures import record_failed
from app.repo.requeues import requeue_message

from .dashboard_world import (
    HTMX,
    LEASE,
    NOW,
    Tenants,
    csrf_token,
    failed_message,
    make_staff,
    page_token,
    sent_message,
    sign_in,
    use_clock,
)


@pytest.fixture
def operator(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def row(db: Database, message_id: int) -> Message:
    with db.transaction() as session:
        found = session.get(Message, message_id, populate_existing=True)
        assert found is not None
        return found


def requeue(
    client: FlaskClient, message_id: int, cycle: int, *, htmx: bool = True, **form: str
) -> tuple[int, str]:
    data = {"csrf_token": page_token(client, "/dead-letters"), "cycle": str(cycle), **form}
    response = client.post(
        f"/dead-letters/{message_id}/requeue", data=data, headers=HTMX if htmx else {}
    )
    return response.status_code, response.get_data(as_text=True)


def test_an_operators_one_click_requeue_swaps_the_row_and_says_it_went_under_a_new_key(
    operator: FlaskClient, db: Database, tenants: Tenants, redis_url: str
) -> None:
    message_id = failed_message(db, tenants.acme)
    assert '<button type="submit" class="primary">Requeue</button>' in operator.get(
        "/dead-letters"
    ).get_data(as_text=True)
    status, body = requeue(operator, message_id, 1)
    assert status == 200
    assert status == 200
    assert body.lstrip().startswith(f'<tr id="dead-letter-{message_id}"')
    assert "Requeued: cycle 2, new provider key." in body
    requeued = row(db, message_id)
    assert (requeued.status, requeued.cycle, requeued.provider_key_cycle) == ("queued", 2, 2)
    with db.transaction() as session:
        audit = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "message.requeue")
        ).one()
    assert (audit.actor, audit.action, audit.target) == (
        "ops@acme.test",
        "message.requeue",
        f"message:{message_id}",
    )
    assert audit.tenant_id == tenants.acme.tenant_id
    assert Redis.from_url(redis_url).keys("rq:*"), "the message was rung after the commit"


def test_a_requeue_after_an_unknown_outcome_warns_and_goes_under_the_same_key(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(
        db,
        tenants.acme,
        failure_class="exhausted",
        error={"provider": "whatsapp", "code": 131000, "title": "Something went wrong"},
        had_unknown=True,
    )
    page = operator.get("/dead-letters").get_data(as_text=True)
    assert "The provider may already hold this message; it goes again under the same key." in page
    assert "Requeue, same key" in page
    status, body = requeue(operator, message_id, 1)
    assert status == 200
    assert "Requeued: cycle 2, same provider key" in body
    assert row(db, message_id).provider_key_cycle == 1


def test_a_requeue_is_refused_when_the_provider_may_hold_a_deliverable_copy(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme, accepted_id="wamid.HELD")
    page = operator.get("/dead-letters").get_data(as_text=True)
    assert (
        "Refused: provider id wamid.HELD was accepted in cycle 1 and never reported failed" in page
    )
    assert f'action="/dead-letters/{message_id}/requeue"' not in page  # no button
    status, body = requeue(operator, message_id, 1)
    assert status == 200  # a hand-made POST is refused too
    assert status == 200
    assert "Not requeued: message" in body and "may already be with the customer" in body
    assert row(db, message_id).status == "failed"


def test_a_stale_page_cannot_requeue_a_message_that_was_requeued_and_failed_again(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme)
    with db.transaction() as session:
        requeue_message(session, message_id, NOW, actor="someone else")
    with db.transaction() as session:
        claim = claim_message(session, message_id, NOW, LEASE)
        assert claim is not None
        record_failed(
            session,
            claim,
            NOW,
            failure_class="needs_human",
            error={"provider": "whatsapp", "code": 132001},
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
    status, body = requeue(operator, message_id, 1)
    assert status == 200  # the page showed cycle 1
    assert "Not requeued: changed since you loaded it (now cycle 2, failed)" in body
    assert row(db, message_id).cycle == 2
    # The row is re-drawn with the cycle it has now, so a deliberate second click can act.
    assert 'name="cycle" value="2"' in body


def test_a_message_that_has_not_failed_is_not_requeued(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = sent_message(db, tenants.acme, "wamid.SENT")
    status, body = requeue(operator, message_id, 1)
    assert status == 200
    assert "Not requeued: message" in body and "is sent, not failed" in body
    assert row(db, message_id).status == "sent"


def test_without_javascript_a_requeue_redirects_back_and_says_what_happened(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme)
    status, _ = requeue(operator, message_id, 1, htmx=False, next="/dead-letters?class=needs_human")
    assert status == 302
    page = operator.get("/dead-letters").get_data(as_text=True)
    assert f"Message {message_id}: Requeued: cycle 2, new provider key." in page


def test_a_requeue_post_without_a_csrf_token_is_refused(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme)
    response = operator.post(f"/dead-letters/{message_id}/requeue", data={"cycle": "1"})
    assert response.status_code == 400
    assert row(db, message_id).status == "failed"


def test_a_viewer_sees_no_requeue_button_and_a_viewers_requeue_is_refused(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    use_clock(app)
    make_staff(db, "view@acme.test", "viewer", tenants.acme.tenant_id)
    viewer = app.test_client()
    sign_in(viewer, "view@acme.test")
    message_id = failed_message(db, tenants.acme)
    page = viewer.get("/dead-letters").get_data(as_text=True)
    assert (
        "Read only: an operator can requeue." in page
        and '<button type="submit" class="primary"' not in page
    )
    detail = viewer.get(f"/messages/{message_id}").get_data(as_text=True)
    assert "Read only: an operator can requeue this message." in detail
    for path in (f"/dead-letters/{message_id}/requeue", f"/messages/{message_id}/requeue"):
        response = viewer.post(path, data={"csrf_token": csrf_token(page), "cycle": "1"})
        assert response.status_code == 403
    assert row(db, message_id).status == "failed"


def test_the_message_page_warns_the_provider_may_hold_it_and_a_forced_requeue_needs_a_reason(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme, accepted_id="wamid.HELD2")
    page = operator.get(f"/messages/{message_id}").get_data(as_text=True)
    assert "The provider may already have delivered this message" in page
    assert "Force requeue: may text twice" in page and 'name="reason"' in page
    token = csrf_token(page)
    path = f"/messages/{message_id}/requeue"
    no_reason = operator.post(
        path, data={"csrf_token": token, "cycle": "1", "force": "1"}, headers=HTMX
    ).get_data(as_text=True)
    assert "Not requeued: a forced requeue needs a reason" in no_reason
    forced = operator.post(
        path,
        data={"csrf_token": token, "cycle": "1", "force": "1", "reason": "customer asked again"},
        headers=HTMX,
    ).get_data(as_text=True)
    assert "Requeued: cycle 2, new provider key. Forced, reason recorded." in forced
    assert 'id="status-widget"' in forced and 'hx-swap-oob="true"' in forced
    with db.transaction() as session:
        audit = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "message.requeue")
        ).one()
    assert audit.detail is not None and audit.detail["reason"] == "customer asked again"
    after = operator.get(f"/messages/{message_id}").get_data(as_text=True)
    assert "Cycle 2" in after and "ops@acme.test" in after  # who requeued it, in the timeline


def test_an_attempt_still_in_flight_is_not_offered_a_requeue(
    app: Flask, operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme)
    with db.transaction() as session:
        session.get(Message, message_id).lease_until = NOW + timedelta(seconds=20)  # type: ignore[union-attr]
    page = operator.get("/dead-letters").get_data(as_text=True)
    assert "An attempt is in flight until" in page
    status, body = requeue(operator, message_id, 1)
    assert status == 200
    assert "still in flight" in body
