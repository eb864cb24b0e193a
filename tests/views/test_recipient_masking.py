"""A recipient's number is masked on every page, in the provider's verbatim answers and the
raw webhooks too; an operator reveals it with one click, and the audit log says who looked.
A viewer gets no such click."""

from __future__ import annotations

from flask import Flask, g
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Message

from ..meta import encode, sign, status, status_body
from .dashboard_world import (
    NOW,
    Tenants,
    failed_message,
    make_staff,
    page_token,
    sent_message,
    sign_in,
    use_clock,
)

NUMBER = "15557654321"
ERROR = {
    "provider": "whatsapp",
    "code": 131030,
    "title": f"Recipient {NUMBER} not in allowed list",
    "message": f"(#131030) Recipient phone number +{NUMBER} not in allowed list",
    "details": f"Add +{NUMBER} to the allowed list",
}


def signed_in(app: Flask, db: Database, tenants: Tenants, role: str) -> FlaskClient:
    use_clock(app)
    make_staff(db, f"{role}@acme.test", role, tenants.acme.tenant_id)
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    client = app.test_client()
    sign_in(client, f"{role}@acme.test")
    return client


def page(client: FlaskClient, path: str) -> str:
    g.pop("_login_user", None)
    response = client.get(path, follow_redirects=True)
    assert response.status_code == 200
    return response.get_data(as_text=True)


def test_no_page_shows_the_full_number_in_its_answers_or_raw_webhooks(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    failed = failed_message(db, tenants.acme, error=ERROR, recipient=NUMBER)
    delivered = sent_message(db, tenants.acme, "wamid.masked", minute=1)
    with db.transaction() as session:
        row = session.get(Message, delivered)
        assert row is not None
        row.recipient = NUMBER
    raw = encode(
        status_body(
            [status("wamid.masked", "delivered", NOW, recipient=NUMBER)], phone_number_id="1000001"
        )
    )
    answer = app.test_client().post(
        "/webhooks/whatsapp",
        data=raw,
        headers={
            "Content-Type": "application/json",
            "X-Hub-Signature-256": sign(raw, "app-secret-acme"),
        },
    )
    assert answer.status_code == 200, answer.get_json()

    operator = signed_in(app, db, tenants, "operator")
    for path in (
        f"/messages/{failed}",
        f"/messages/{delivered}",
        "/dead-letters",
        f"/search?q={failed}",
    ):
        html = page(operator, path)
        assert NUMBER not in html, path
    detail = page(operator, f"/messages/{delivered}")
    assert "…4321" in detail and "Show full number" in detail
    assert "wamid.masked" in detail  # the raw webhook is there, its number masked


def test_an_operator_reveals_the_number_with_one_click_and_the_audit_log_says_who(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    failed = failed_message(db, tenants.acme, error=ERROR, recipient=NUMBER)
    operator = signed_in(app, db, tenants, "operator")
    token = page_token(operator, f"/messages/{failed}")
    g.pop("_login_user", None)
    answer = operator.post(
        f"/messages/{failed}/recipient", data={"csrf_token": token}, headers={"HX-Request": "true"}
    )
    assert answer.status_code == 200
    assert f"<code>{NUMBER}</code>" in answer.get_data(as_text=True)
    # Without JavaScript the form answers with the page, the number shown.
    g.pop("_login_user", None)
    whole = operator.post(f"/messages/{failed}/recipient", data={"csrf_token": token})
    assert whole.status_code == 200 and NUMBER in whole.get_data(as_text=True)
    with db.transaction() as session:
        rows = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "message.reveal_recipient")
        ).all()
    assert [(r.actor, r.target, r.tenant_id) for r in rows] == [
        ("operator@acme.test", f"message:{failed}", tenants.acme.tenant_id)
    ] * 2


def test_a_viewer_gets_no_reveal_and_another_tenants_message_is_not_found(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    failed = failed_message(db, tenants.acme, error=ERROR, recipient=NUMBER)
    theirs = failed_message(db, tenants.other, recipient="15550009999", minute=2)
    viewer = signed_in(app, db, tenants, "viewer")
    assert "Show full number" not in page(viewer, f"/messages/{failed}")
    token = page_token(viewer, f"/messages/{failed}")
    g.pop("_login_user", None)
    assert (
        viewer.post(f"/messages/{failed}/recipient", data={"csrf_token": token}).status_code == 403
    )
    operator = signed_in(app, db, tenants, "operator")
    token = page_token(operator, f"/messages/{failed}")
    g.pop("_login_user", None)
    assert (
        operator.post(f"/messages/{theirs}/recipient", data={"csrf_token": token}).status_code
        == 404
    )
    with db.transaction() as session:
        assert not session.scalars(
            select(AuditEntry).where(AuditEntry.action == "message.reveal_recipient")
        ).all()
