"""`/webhooks/messenger` over real HTTP with real signatures: Messenger and Instagram.

Bodies are the documented shapes in `tests/fixtures/messenger/` (see its README for each
one's source), with this test's ids and times put in.
"""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from app.models import ConversationWindow, Message, WebhookDelivery
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message

from ..conftest import T0
from ..factories import World, make_message, make_world
from .messenger_bodies import IG, PAGE, PSID, SECRET, delivery, fixture, ms, sign
from .messenger_server import LEASE, Ratchet

OTHER_PAGE = "1067280970047461"
OTHER_PSID = "1254477777772920"


def read(*, watermark: int, page_id: str = PAGE, psid: str = PSID) -> dict[str, Any]:
    body = fixture("read")
    entry = body["entry"][0]
    entry["id"] = page_id
    event = entry["messaging"][0]
    event["sender"]["id"], event["recipient"]["id"] = psid, page_id
    event["read"]["watermark"] = watermark
    event["timestamp"] = watermark + 50
    return body


# The GET handshake ------------------------------------------------------------------------


def test_the_handshake_echoes_the_challenge_only_for_a_messenger_or_instagram_verify_token(
    ratchet: Ratchet, page: World
) -> None:
    make_world(ratchet.db, name="wa", account_id="106540352242922", verify_token="wa-vt")
    url = f"{ratchet.url}/webhooks/messenger"
    ok = ratchet.http.get(
        url, params={"hub.mode": "subscribe", "hub.verify_token": "page-vt", "hub.challenge": "42"}
    )
    assert (ok.status_code, ok.text) == (200, "42")
    for token in ("wa-vt", "nope"):  # a WhatsApp identity's token is not a Page's
        refused = ratchet.http.get(
            url, params={"hub.mode": "subscribe", "hub.verify_token": token, "hub.challenge": "1"}
        )
        assert refused.status_code == 403


# Signatures ------------------------------------------------------------------------------


def test_forged_tampered_and_wrongly_keyed_deliveries_are_refused_with_nothing_applied(
    ratchet: Ratchet, page: World
) -> None:
    message_id = ratchet.sent(page, PSID, T0, "m_one")
    body = delivery(mids=["m_one"], watermark=ms(T0) + 5000)
    raw = json.dumps(body).encode()
    tampered = raw.replace(b"m_one", b"m_two")
    inbound = fixture("inbound_text")
    answers = [
        ratchet.post(raw, signed=False),  # forged: no signature at all
        ratchet.post(raw, signature="sha256=" + "0" * 64),  # forged: made-up signature
        ratchet.post(tampered, signature=sign(raw)),  # tampered after signing
        ratchet.post(raw, secret="another-apps-secret"),  # wrongly keyed
        ratchet.post(raw, signature="sha1=" + hashlib.sha1(raw).hexdigest()),  # legacy header
        ratchet.post(inbound, secret="another-apps-secret"),
    ]
    assert [answer.status_code for answer in answers] == [401] * len(answers)
    assert len({answer.text for answer in answers}) == 1  # one answer for all of them
    assert ratchet.status(message_id) == "sent"
    assert ratchet.count(WebhookDelivery) == 0
    assert ratchet.count(ConversationWindow) == 0
    # The same body, rightly signed, applies.
    assert ratchet.post(raw).status_code == 200
    assert ratchet.status(message_id) == "delivered"


def test_a_delivery_naming_only_a_page_we_do_not_know_is_refused(
    ratchet: Ratchet, page: World
) -> None:
    message_id = ratchet.sent(page, PSID, T0, "m_one")
    body = delivery(mids=["m_one"], watermark=ms(T0) + 5000, page_id="999999")
    assert ratchet.post(body).status_code == 401
    assert ratchet.status(message_id) == "sent"


def test_an_instagram_delivery_does_not_verify_against_a_messenger_page_of_that_id(
    ratchet: Ratchet, page: World
) -> None:
    message_id = ratchet.sent(page, PSID, T0, "m_one")
    body = delivery(mids=["m_one"], watermark=ms(T0) + 5000)
    body["object"] = "instagram"
    assert ratchet.post(body).status_code == 401  # no Instagram account has that id
    assert ratchet.status(message_id) == "sent"


def test_an_envelope_that_is_neither_page_nor_instagram_is_a_clear_400(
    ratchet: Ratchet, page: World
) -> None:
    body = delivery(mids=["m_one"], watermark=1)
    body["object"] = "whatsapp_business_account"
    answer = ratchet.post(body)
    assert answer.status_code == 400
    assert "'page' or 'instagram'" in answer.json()["error"]
    assert ratchet.count(WebhookDelivery) == 0


# Receipts by mid, and every entry ---------------------------------------------------------


def test_a_delivery_with_mids_moves_exactly_those_messages_not_others_under_its_watermark(
    ratchet: Ratchet, page: World
) -> None:
    named = ratchet.sent(page, PSID, T0, "mid.1458668856218:ed81099e15d3f4f233")
    unnamed = ratchet.sent(page, PSID, T0 + timedelta(seconds=1), "m_unnamed")
    body = fixture("delivery_with_mids")  # the documented example, its ids ours
    body["entry"][0]["messaging"][0]["delivery"]["watermark"] = ms(T0) + 60_000
    answer = ratchet.post(body)
    assert answer.status_code == 200, answer.text
    assert (ratchet.status(named), ratchet.status(unnamed)) == ("delivered", "sent")


def test_every_entry_of_a_delivery_is_applied(ratchet: Ratchet, page: World) -> None:
    other = make_world(
        ratchet.db, name="acme-2", provider="messenger", account_id=OTHER_PAGE, app_secret=SECRET
    )
    first = ratchet.sent(page, PSID, T0, "m_first")
    second = ratchet.sent(other, PSID, T0, "m_second")
    body = delivery(mids=["m_first"], watermark=ms(T0) + 1000)
    body["entry"].append(
        delivery(mids=["m_second"], watermark=ms(T0) + 1000, page_id=OTHER_PAGE)["entry"][0]
    )
    assert ratchet.post(body).status_code == 200
    assert (ratchet.status(first), ratchet.status(second)) == ("delivered", "delivered")


# Watermarks ------------------------------------------------------------------------------


def test_a_watermark_without_mids_moves_exactly_that_threads_messages_sent_at_or_before_it(
    ratchet: Ratchet, page: World
) -> None:
    other = make_world(
        ratchet.db, name="acme-2", provider="messenger", account_id=OTHER_PAGE, app_secret=SECRET
    )
    mark = T0 + timedelta(minutes=1)
    early = ratchet.sent(page, PSID, mark - timedelta(seconds=30), "m_early")
    at_mark = ratchet.sent(page, PSID, mark, "m_at_mark")
    # Half a second after the watermark by our clock: never covered, whatever the clocks.
    half_after = ratchet.sent(page, PSID, mark + timedelta(milliseconds=500), "m_half_after")
    after = ratchet.sent(page, PSID, mark + timedelta(milliseconds=1), "m_after")
    other_psid = ratchet.sent(page, OTHER_PSID, mark - timedelta(seconds=30), "m_other_psid")
    other_page = ratchet.sent(other, PSID, mark - timedelta(seconds=30), "m_other_page")
    unsent = make_message(ratchet.db, page, recipient=PSID)  # queued: never sent

    answer = ratchet.post(delivery(mids=None, watermark=ms(mark)))
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"] == {"duplicate": 0, "applied": 2}
    statuses = {
        name: ratchet.status(message_id)
        for name, message_id in [
            ("early", early),
            ("at_mark", at_mark),
            ("half_after", half_after),
            ("after", after),
            ("other_psid", other_psid),
            ("other_page", other_page),
            ("unsent", unsent),
        ]
    }
    assert statuses == {
        "early": "delivered",
        "at_mark": "delivered",
        "half_after": "sent",
        "after": "sent",
        "other_psid": "sent",
        "other_page": "sent",
        "unsent": "queued",
    }


def test_a_read_watermark_reads_the_thread_and_a_late_delivery_never_moves_it_back(
    ratchet: Ratchet, page: World
) -> None:
    mark = T0 + timedelta(minutes=1)
    first = ratchet.sent(page, PSID, mark - timedelta(seconds=20), "m_first")
    second = ratchet.sent(page, PSID, mark - timedelta(seconds=10), "m_second")
    later = ratchet.sent(page, PSID, mark + timedelta(seconds=10), "m_later")

    assert ratchet.post(read(watermark=ms(mark))).status_code == 200
    assert [ratchet.status(m) for m in (first, second, later)] == ["read", "read", "sent"]
    # Meta's delivery receipt for the same messages arrives after the read: recorded late,
    # never applied, nothing goes back.
    late = ratchet.post(delivery(mids=None, watermark=ms(mark)))
    assert late.status_code == 200
    assert [ratchet.status(m) for m in (first, second, later)] == ["read", "read", "sent"]
    assert ratchet.applied_events(first) == ["read"]
    # The same read again is a duplicate: no new event.
    again = ratchet.post(read(watermark=ms(mark)))
    assert again.status_code == 200
    assert ratchet.applied_events(first) == ["read"]
    # A later watermark reaches the later message.
    assert ratchet.post(read(watermark=ms(mark) + 20_000)).status_code == 200
    assert ratchet.status(later) == "read"


def test_a_watermark_then_a_receipt_by_mid_for_the_same_message_is_a_duplicate(
    ratchet: Ratchet, page: World
) -> None:
    message_id = ratchet.sent(page, PSID, T0, "m_one")
    assert ratchet.post(delivery(mids=None, watermark=ms(T0) + 500)).status_code == 200
    answer = ratchet.post(delivery(mids=["m_one"], watermark=ms(T0) + 500))
    assert answer.json()["results"] == {"duplicate": 1}
    assert ratchet.applied_events(message_id) == ["delivered"]


# Inbound: the window ---------------------------------------------------------------------


def test_an_inbound_message_opens_the_window_and_an_echo_of_ours_does_not(
    ratchet: Ratchet, page: World
) -> None:
    body = fixture("inbound_text")
    echo = copy.deepcopy(body)
    event = echo["entry"][0]["messaging"][0]
    event["sender"], event["recipient"] = {"id": PAGE}, {"id": OTHER_PSID}
    event["message"]["is_echo"] = True
    assert ratchet.post(echo).status_code == 200
    assert ratchet.count(ConversationWindow) == 0
    assert ratchet.post(body).status_code == 200
    with ratchet.db.transaction() as session:
        window = session.scalars(select(ConversationWindow)).one()
        assert (window.identity_id, window.recipient) == (page.identity_id, PSID)
        wrote = datetime.fromtimestamp(1458692752478 / 1000, T0.tzinfo)
        assert window.last_inbound_at == wrote
        assert window.open_until == wrote + timedelta(hours=24)


# Instagram -------------------------------------------------------------------------------


def test_instagram_inbound_opens_its_window_and_messaging_seen_reads_the_message_by_mid(
    ratchet: Ratchet,
) -> None:
    account = make_world(ratchet.db, provider="instagram", account_id=IG, app_secret=SECRET)
    igsid = "6230000000000001"
    seen_mid = "aWdfZAG1faWQ6MTpJR01lc3NhZA2VfSUQ6MTc4NDE0MDAwMDAwMDAwMDI"
    seen = ratchet.sent(account, igsid, T0, seen_mid)
    other = ratchet.sent(account, igsid, T0, "aWdf-another")
    assert ratchet.post(fixture("instagram_inbound_text")).status_code == 200
    with ratchet.db.transaction() as session:
        window = session.scalars(select(ConversationWindow)).one()
        assert (window.identity_id, window.recipient) == (account.identity_id, igsid)
    answer = ratchet.post(fixture("instagram_seen"))
    assert answer.status_code == 200, answer.text
    assert (ratchet.status(seen), ratchet.status(other)) == ("read", "sent")


# Echoes: our own sends, matched by the metadata we gave them -------------------------------


def test_an_echo_carrying_our_correlation_id_records_the_mid_of_a_send_whose_answer_was_lost(
    ratchet: Ratchet, page: World
) -> None:
    """The send answer never reached us (a timeout): the echo is Meta saying it has the
    message. Matched by the metadata we sent, it records the mid and moves to `sent`, so
    the retry after the grace finds nothing to resend; receipts then match by that mid."""
    message_id = make_message(ratchet.db, page, recipient=PSID)
    with ratchet.db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, "key", T0)
        correlation_id = session.get(Message, message_id).correlation_id  # type: ignore[union-attr]
    body = fixture("echo")
    event = body["entry"][0]["messaging"][0]
    event["message"]["metadata"] = correlation_id
    event["timestamp"] = ms(T0) + 300
    mid = event["message"]["mid"]
    assert ratchet.post(body).status_code == 200
    with ratchet.db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None and (row.status, row.provider_message_id) == ("sent", mid)
    # Its call's start is not known yet (the answer was lost): the echo's own time, when
    # Meta had it, stands in for it, so a read watermark after the echo covers it and
    # one before it does not.
    assert ratchet.post(read(watermark=ms(T0) + 299)).status_code == 200
    assert ratchet.status(message_id) == "sent"
    assert ratchet.post(read(watermark=ms(T0) + 1000)).status_code == 200
    assert ratchet.status(message_id) == "read"


def test_an_echo_is_not_a_customer_writing_and_a_forged_metadata_matches_nothing(
    ratchet: Ratchet, page: World
) -> None:
    message_id = ratchet.sent(page, PSID, T0, "m_ours")
    body = fixture("echo")  # the documented metadata placeholder: not one of our ids
    assert ratchet.post(body).status_code == 200
    assert ratchet.count(ConversationWindow) == 0
    assert ratchet.status(message_id) == "sent"
    assert ratchet.applied_events(message_id) == []


# Hostile bodies --------------------------------------------------------------------------


def test_hostile_bodies_get_clear_answers_and_store_nothing(ratchet: Ratchet, page: World) -> None:
    not_json = ratchet.post(b"{not json")
    assert not_json.status_code == 400 and "not a messenger webhook" in not_json.json()["error"]
    no_entry_id = delivery(mids=["m"], watermark=1)
    del no_entry_id["entry"][0]["id"]
    assert ratchet.post(no_entry_id).status_code == 400
    many = delivery(mids=["m"], watermark=1)
    many["entry"] = [dict(many["entry"][0], id=str(n)) for n in range(101)]
    assert ratchet.post(many).status_code == 400
    huge = b'{"object":"page","entry":[],"pad":"' + b"x" * (1024 * 1024) + b'"}'
    assert ratchet.post(huge).status_code == 413
    assert ratchet.count(WebhookDelivery) == 0


def test_a_signed_body_of_a_shape_we_do_not_know_is_kept_and_acknowledged(
    ratchet: Ratchet, page: World
) -> None:
    body = delivery(mids=None, watermark=1)
    body["entry"][0]["messaging"][0]["delivery"]["watermark"] = "not a time"
    answer = ratchet.post(body)
    assert answer.status_code == 202 and "not understood" in answer.json()["error"]
    assert ratchet.count(WebhookDelivery) == 1  # kept verbatim for a person to read
