"""The audit log says what an identity update changed (never a secret's value)."""

from __future__ import annotations

from flask import Flask

from app.crypto import SecretBox
from app.db import Database
from app.models import Identity
from app.repo import identity_actions

from ..conftest import SECRET_KEY
from .dashboard_world import NOW, make_staff, make_tenants, sign_in, use_clock


def test_an_identity_update_says_the_token_was_replaced_and_the_rates_set(
    app: Flask, db: Database
) -> None:
    tenants = make_tenants(db)
    use_clock(app)
    make_staff(db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    with db.transaction() as session:
        identity = session.get(Identity, tenants.acme.identity_id)
        assert identity is not None
        identity_actions.change(
            session,
            SecretBox(SECRET_KEY),
            identity,
            actor="admin@acme.test",
            now=NOW,
            via="web",
            token="a-brand-new-token-0123456789",
            reply_rate=5.0,
        )
    client = app.test_client()
    sign_in(client, "admin@acme.test")
    page = client.get("/audit").get_data(as_text=True)
    assert "identity.update" in page
    assert "token replaced" in page and "rates: reply 5/s" in page
    assert "a-brand-new-token" not in page


def test_an_automatic_pause_is_logged_as_ratchet_with_its_reason(app: Flask, db: Database) -> None:
    from app.repo.identities import pause_identity

    tenants = make_tenants(db)
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    with db.transaction() as session:  # what a 190 answer does, through the same function
        assert pause_identity(session, tenants.acme.identity_id, "190: token expired", NOW)
        # Already paused: nothing more is logged.
        assert not pause_identity(session, tenants.acme.identity_id, "190 again", NOW)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    page = client.get("/audit").get_data(as_text=True)
    assert page.count('<td data-label="Action">identity.pause') == 1
    assert "<code>ratchet</code>" in page and "190: token expired" in page
    assert "automatic" in page


def test_a_dismissal_can_be_undone_and_both_are_audited(app: Flask, db: Database) -> None:
    from .dashboard_world import failed_message, page_token

    tenants = make_tenants(db)
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    message_id = failed_message(db, tenants.acme)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    token = page_token(client, "/dead-letters")
    form = {"csrf_token": token, "cycle": "1", "reason": "customer called", "next": "/dead-letters"}
    client.post(f"/dead-letters/{message_id}/dismiss", data=form)
    assert f'id="dead-letter-{message_id}"' not in client.get("/dead-letters").get_data(
        as_text=True
    )
    dismissed = client.get("/dead-letters?dismissed=1").get_data(as_text=True)
    assert "Undo the dismissal" in dismissed
    response = client.post(f"/dead-letters/{message_id}/undismiss", data=form)
    assert response.status_code == 302
    listed = client.get("/dead-letters").get_data(as_text=True)
    assert f'id="dead-letter-{message_id}"' in listed
    assert "Back on the dead-letter list." in listed
    audit = client.get("/audit").get_data(as_text=True)
    assert "message.dismiss" in audit and "message.undismiss" in audit
    assert "customer called" in audit
