"""One Meta app serving two tenants' numbers (one app secret, as a platform's app is)
batches both tenants' changes into one delivery. Such a delivery belongs to no single
identity, so no message page shows its "Whole delivery" raw body: a tenant's staff never
see the other tenant's customers, their numbers or what they wrote (DESIGN sections 1, 9)."""

from __future__ import annotations

import copy

from flask import Flask

from app.db import Database

from ..meta import encode, fixture, sign, status
from .dashboard_world import NOW, make_staff, make_tenants, sent_message, sign_in, use_clock

ACME_PHONE = "1000001"  # make_tenants' numbers; both share make_world's app secret
OTHER_PHONE = "2000002"
SECRET = "app-secret-acme"
THEIR_WORDS = "my card number is 4929 1234 5678 9012"
THEIR_CUSTOMER = "447700900123"


def test_a_delivery_batching_two_tenants_never_shows_one_tenant_the_others_customers(
    app: Flask, db: Database
) -> None:
    tenants = make_tenants(db)
    use_clock(app)
    mine = sent_message(db, tenants.acme, "wamid.ACME1")

    # One delivery, as Meta batches it for one app: acme's status first, then the other
    # tenant's customer writing in.
    body = fixture("status_sent")
    acme_change = body["entry"][0]["changes"][0]
    acme_change["value"]["metadata"]["phone_number_id"] = ACME_PHONE
    acme_change["value"]["statuses"] = [status("wamid.ACME1", "delivered", NOW)]
    inbound = fixture("inbound_text")["entry"][0]
    theirs = copy.deepcopy(inbound)
    theirs["id"] = "999"
    value = theirs["changes"][0]["value"]
    value["metadata"]["phone_number_id"] = OTHER_PHONE
    value["contacts"][0]["wa_id"] = THEIR_CUSTOMER
    value["messages"][0]["from"] = THEIR_CUSTOMER
    value["messages"][0]["text"]["body"] = THEIR_WORDS
    body["entry"].append(theirs)
    raw = encode(body)

    with app.test_client() as meta:
        answer = meta.post(
            "/webhooks/whatsapp",
            data=raw,
            headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, SECRET)},
        )
    assert answer.status_code == 200, answer.get_json()

    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    with app.test_client() as acme:
        sign_in(acme, "ops@acme.test")
        page = acme.get(f"/messages/{mine}")
        assert page.status_code == 200
        html = page.get_data(as_text=True)
    assert "delivered" in html  # acme's own status is there, as it should be
    leaked = [needle for needle in (THEIR_WORDS, THEIR_CUSTOMER, OTHER_PHONE) if needle in html]
    assert not leaked, (
        f"acme's message page shows the other tenant's data {leaked}: the whole raw "
        "delivery, stored under acme's identity, carries the other tenant's change"
    )
