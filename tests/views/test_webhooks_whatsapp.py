"""`/webhooks/whatsapp` with real signatures: the reconciler's rules, end to end."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from app.clock import utcnow
from app.db import Database
from app.models import MessageEvent, WebhookDelivery, WebhookStatus
from app.repo.acceptance import record_accepted
from app.repo.attempts import finish_attempt
from app.repo.failures import record_failed
from app.repo.requeues import requeue_message

from ..conftest import at
from ..factories import World, make_world, message
from ..meta import PHONE_NUMBER_ID, encode, fixture, status, status_body
from ..whatsapp_world import SECRET, claimed, deliver, sent_message, set_app_secret, webhook_events
from .whatsapp_webhook_fixtures import assert_nothing_applied, client, world

__all__ = ["client", "world"]  # the fixtures, imported for these tests


def test_the_transcribed_sent_delivered_and_read_fixtures_move_a_message_forward(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(
        db, world, "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"
    )
    for name in ("status_sent", "status_delivered", "status_read"):
        response = deliver(client, encode(fixture(name)))
        assert response.status_code == 200, response.get_json()
    row = message(db, message_id)
    assert row.status == "read"
    read_ts = int(
        fixture("status_read")["entry"][0]["changes"][0]["value"]["statuses"][0]["timestamp"]
    )
    assert int(row.read_at.timestamp()) == read_ts  # the provider's clock
    with db.transaction() as session:
        deliveries = session.scalars(select(WebhookDelivery)).all()
    assert len(deliveries) == 3 and all(d.body for d in deliveries)


def test_a_batch_with_known_and_unknown_ids_is_acknowledged_and_the_unknown_parked(
    client: FlaskClient, db: Database, world: World
) -> None:
    first = sent_message(db, world, "wamid.KNOWN1")
    second = sent_message(db, world, "wamid.KNOWN2")
    body = status_body(
        [
            status("wamid.KNOWN1", "delivered", at(5)),
            status("wamid.UNKNOWN", "delivered", at(5)),
            status("wamid.KNOWN2", "read", at(6)),
        ]
    )
    # A second entry in the same POST, as Meta batches.
    body["entry"].append(status_body([status("wamid.KNOWN1", "read", at(7))])["entry"][0])
    response = deliver(client, encode(body))
    assert response.status_code == 200
    assert response.get_json()["results"]["parked"] == 1
    assert message(db, first).status == "read" and message(db, second).status == "read"
    with db.transaction() as session:
        parked = session.scalars(
            select(WebhookStatus).where(WebhookStatus.provider_message_id == "wamid.UNKNOWN")
        ).one()
    assert parked.result == "parked" and parked.applied_at is None


def test_a_failed_status_keeps_its_error_verbatim(
    client: FlaskClient, db: Database, world: World
) -> None:
    wamid = fixture("status_failed")["entry"][0]["changes"][0]["value"]["statuses"][0]["id"]
    message_id = sent_message(db, world, wamid)
    assert deliver(client, encode(fixture("status_failed"))).status_code == 200
    row = message(db, message_id)
    assert row.status == "failed" and row.failure_class == "permanent"
    assert row.last_error is not None
    assert row.last_error["code"] == 131047
    assert row.last_error["title"] == "Re-engagement message"
    assert "24 hours" in row.last_error["details"]


def test_an_inbound_message_opens_the_window_so_free_text_defaults_to_reply(
    client: FlaskClient, db: Database, world: World, app: Flask
) -> None:
    inbound = fixture("inbound_text")
    message_obj = inbound["entry"][0]["changes"][0]["value"]["messages"][0]
    message_obj["timestamp"] = str(int(utcnow().timestamp()))
    assert deliver(client, encode(inbound)).status_code == 200
    auth = {"Authorization": f"Bearer {world.api_key}"}
    to = message_obj["from"]
    text = client.post(
        "/v1/messages",
        json={"identity_id": world.identity_id, "to": to, "text": "on it"},
        headers=auth,
    )
    template = client.post(
        "/v1/messages",
        json={
            "identity_id": world.identity_id,
            "to": to,
            "template": {"name": "reminder", "language": "en_US"},
        },
        headers=auth,
    )
    stranger = client.post(
        "/v1/messages",
        json={"identity_id": world.identity_id, "to": "15559990000", "text": "hi"},
        headers=auth,
    )
    assert text.get_json()["lane"] == "reply"
    assert template.get_json()["lane"] == "campaign"
    assert stranger.get_json()["lane"] == "campaign"


# Signatures -----------------------------------------------------------------------------


WORDS = ["sent", "delivered", "read"]
TIMES = {"sent": 10, "delivered": 20, "read": 30}


def sequences() -> list[tuple[str, ...]]:
    found = []
    for perm in itertools.permutations(WORDS):
        found.append(perm)
        found.append(tuple(w for w in perm for _ in (0, 1)))  # each duplicated at once
        found.append(perm + perm)  # the whole batch redelivered
    return found


@pytest.mark.parametrize("sequence", sequences(), ids="-".join)
def test_every_order_of_sent_delivered_read_with_duplicates_ends_at_read(
    client: FlaskClient, db: Database, world: World, sequence: tuple[str, ...]
) -> None:
    message_id = sent_message(db, world, "wamid.PERM")
    sent_at = message(db, message_id).sent_at
    for word in sequence:
        raw = encode(status_body([status("wamid.PERM", word, at(TIMES[word]))]))
        assert deliver(client, raw).status_code == 200
    row = message(db, message_id)
    assert row.status == "read"
    assert row.sent_at == sent_at  # set by the worker first, never overwritten
    assert row.read_at == at(30)
    # In order, or late after `read` (filled because it was still empty): the provider's time.
    assert row.delivered_at == at(20)
    events = webhook_events(db, message_id)
    assert sorted(e.to_status for e in events) == sorted(WORDS)  # no duplicate events


def test_failed_after_delivered_leaves_it_delivered(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.FD")
    deliver(client, encode(status_body([status("wamid.FD", "delivered", at(5))])))
    deliver(client, encode(status_body([status("wamid.FD", "failed", at(6))])))
    row = message(db, message_id)
    assert row.status == "delivered" and row.failed_at is None
    refused = webhook_events(db, message_id)[-1]
    assert (refused.to_status, refused.applied, refused.refusal) == (
        "failed",
        False,
        "already_shown",
    )


def test_sent_after_failed_leaves_it_failed_with_its_error(
    client: FlaskClient, db: Database, world: World
) -> None:
    claim = claimed(db, world)
    error = {"provider": "whatsapp", "code": 131026, "title": "Message undeliverable"}
    with db.transaction() as session:
        record_failed(
            session,
            claim,
            at(2),
            failure_class="permanent",
            error=error,
            unknown_attempts=0,
            rate_limited_attempts=0,
            had_unknown=False,
        )
    corr = message(db, claim.message_id).correlation_id
    deliver(client, encode(status_body([status("wamid.LATE", "sent", at(3), correlation_id=corr)])))
    row = message(db, claim.message_id)
    assert row.status == "failed" and row.last_error == error


# Matching, parking, cycles ----------------------------------------------------------------


def test_a_status_before_the_provider_id_is_recorded_is_applied_when_it_is(
    client: FlaskClient, db: Database, world: World
) -> None:
    claim = claimed(db, world)
    response = deliver(client, encode(status_body([status("wamid.EARLY", "delivered", at(3))])))
    assert response.get_json()["results"] == {"duplicate": 0, "parked": 1}
    assert message(db, claim.message_id).status == "sending"
    with db.transaction() as session:
        record_accepted(session, claim, "wamid.EARLY", at(4), unknown_attempts=0, had_unknown=False)
    row = message(db, claim.message_id)
    assert row.status == "delivered" and row.delivered_at == at(3)
    assert row.sent_at == at(4)  # the worker's late `sent` fills its own timestamp


def test_a_status_matched_only_by_correlation_id_is_applied_and_its_id_adopted(
    client: FlaskClient, db: Database, world: World
) -> None:
    claim = claimed(db, world)
    corr = message(db, claim.message_id).correlation_id
    deliver(
        client, encode(status_body([status("wamid.ADOPT", "sent", at(3), correlation_id=corr)]))
    )
    row = message(db, claim.message_id)
    assert (row.status, row.provider_message_id) == ("sent", "wamid.ADOPT")


def test_two_provider_ids_for_one_correlation_id_are_flagged_as_a_double_send(
    client: FlaskClient, db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.ONE")
    corr = message(db, message_id).correlation_id
    deliver(
        client, encode(status_body([status("wamid.TWO", "delivered", at(3), correlation_id=corr)]))
    )
    with db.transaction() as session:
        kinds = session.scalars(
            select(MessageEvent.kind).where(MessageEvent.message_id == message_id)
        ).all()
    assert "double_send" in kinds
    assert message(db, message_id).provider_message_id == "wamid.ONE"


def test_a_status_for_an_earlier_cycles_id_is_recorded_not_applied(
    client: FlaskClient, db: Database, world: World
) -> None:
    claim = claimed(db, world)
    with db.transaction() as session:
        finish_attempt(session, claim, at(1), "accepted", provider_message_id="wamid.OLD")
        record_accepted(session, claim, "wamid.OLD", at(1), unknown_attempts=0, had_unknown=False)
    deliver(client, encode(status_body([status("wamid.OLD", "failed", at(2))])))
    with db.transaction() as session:
        requeue_message(session, claim.message_id, at(3), actor="ana")
    deliver(client, encode(status_body([status("wamid.OLD", "delivered", at(4))])))
    row = message(db, claim.message_id)
    assert (row.status, row.cycle, row.provider_message_id) == ("queued", 2, None)
    with db.transaction() as session:
        stored = session.scalars(
            select(WebhookStatus).where(WebhookStatus.status == "delivered")
        ).one()
    assert stored.result == "stale"
    refused = webhook_events(db, claim.message_id)[-1]
    assert (refused.to_status, refused.applied, refused.refusal, refused.cycle) == (
        "delivered",
        False,
        "stale",
        1,
    )


def test_a_failed_webhook_that_beats_the_send_response_keeps_its_class_and_error(
    client: FlaskClient, db: Database, world: World
) -> None:
    claim = claimed(db, world)
    corr = message(db, claim.message_id).correlation_id
    failed = status("wamid.RACE", "failed", at(3), correlation_id=corr)
    deliver(client, encode(status_body([failed])))
    with db.transaction() as session:
        record_accepted(session, claim, "wamid.RACE", at(4), unknown_attempts=0, had_unknown=False)
    row = message(db, claim.message_id)
    assert (row.status, row.failure_class) == ("failed", "permanent")
    assert row.last_error is not None and row.last_error["code"] == 131047
    assert row.sent_at is None  # refused from failed (not "late"): no timestamp filled


def test_a_signed_delivery_we_cannot_parse_is_kept_verbatim_and_acknowledged(
    client: FlaskClient, db: Database, world: World
) -> None:
    body = status_body([status("wamid.BAD", "sent", at(1))])
    del body["entry"][0]["changes"][0]["value"]["statuses"][0]["timestamp"]
    raw = encode(body)
    response = deliver(client, raw)
    assert response.status_code == 202 and "not understood" in response.get_json()["error"]
    with db.transaction() as session:
        (stored,) = session.scalars(select(WebhookDelivery)).all()
    assert stored.body == raw.decode()


def test_a_secret_set_again_between_the_lookup_and_the_record_voids_the_verdict(
    app: Flask, client: FlaskClient, committed_db: Database
) -> None:
    # The record checks the secret the delivery was verified with, looked up or not: here
    # the secret is set again (and committed, elsewhere) just before the record runs.
    world = make_world(committed_db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)
    message_id = sent_message(committed_db, world, "wamid.RACE")
    raw = encode(status_body([status("wamid.RACE", "delivered", at(5))]))
    rotated: list[bool] = []

    def rotate_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if rotated or "INSERT INTO webhook_deliveries" not in statement:
            return
        rotated.append(True)
        other = committed_db.engine.connect()
        with other, Session(bind=other) as session, session.begin():
            set_app_secret(app, session, world.identity_id, "meta-app-secret-2")

    event.listen(committed_db.engine, "before_cursor_execute", rotate_first)
    try:
        response = deliver(client, raw, secret=SECRET)
    finally:
        event.remove(committed_db.engine, "before_cursor_execute", rotate_first)
    assert rotated
    assert response.status_code == 401
    assert_nothing_applied(committed_db, message_id)
    # The next delivery, signed with the secret now set, is stored and applied.
    assert deliver(client, raw, secret="meta-app-secret-2").status_code == 200
    assert message(committed_db, message_id).status == "delivered"
