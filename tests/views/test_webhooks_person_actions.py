"""What a person does besides writing: a tapped button, a link into the thread, a reaction
open the 24-hour window (Messenger and Instagram, as Meta's policy lists them); an opt-in
does not. WhatsApp's `played` counts as `read`. Instagram's echo and read by mid."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from app.models import ConversationWindow, Message, WebhookDelivery
from app.repo.acceptance import record_accepted
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.watermarks import stamp_call_start

from ..conftest import T0
from ..factories import World, make_message, make_world
from .messenger_bodies import IG, PAGE, PSID, SECRET, fixture
from .messenger_server import LEASE, Ratchet

IGSID = "6230000000000001"


def windows(client: Ratchet) -> list[tuple[int, str]]:
    with client.db.transaction() as session:
        rows = session.scalars(select(ConversationWindow).order_by(ConversationWindow.id))
        return [(row.identity_id, row.recipient) for row in rows]


@pytest.fixture
def instagram(ratchet: Ratchet) -> World:
    return make_world(ratchet.db, name="ig", provider="instagram", account_id=IG, app_secret=SECRET)


@pytest.mark.parametrize("name", ["postback", "referral", "reaction"])
def test_a_tapped_button_a_link_into_the_thread_or_a_reaction_opens_the_window(
    ratchet: Ratchet,
    page: World,
    name: str,
) -> None:
    answer = ratchet.post(fixture(name))
    assert answer.status_code == 200, answer.text
    assert answer.json()["inbound"] == 1
    assert windows(ratchet) == [(page.identity_id, PSID)]


def test_an_opt_in_without_a_sender_opens_nothing_and_is_still_acknowledged(
    ratchet: Ratchet,
    page: World,
) -> None:
    answer = ratchet.post(fixture("optin_user_ref"))
    assert answer.status_code == 200, answer.text
    assert windows(ratchet) == []


def test_an_instagram_postback_opens_the_window_of_that_igsid(
    ratchet: Ratchet,
    instagram: World,
) -> None:
    assert ratchet.post(fixture("instagram_postback")).status_code == 200
    assert windows(ratchet) == [(instagram.identity_id, IGSID)]


def _sent(client: Ratchet, world: World, recipient: str, mid: str) -> int:
    message_id = make_message(client.db, world, recipient=recipient)
    with client.db.transaction() as session:
        claim = claim_message(session, message_id, T0, LEASE)
        assert claim is not None
        start_attempt(session, claim, f"key-{message_id}", T0)
        stamp_call_start(session, claim, "instagram", T0)
        record_accepted(
            session, claim, mid, T0 + timedelta(seconds=1), unknown_attempts=0, had_unknown=False
        )
    return message_id


def _status(client: Ratchet, message_id: int) -> str:
    with client.db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        return row.status


def test_an_instagram_echo_is_our_sent_and_opens_no_window_and_its_seen_reads_it(
    ratchet: Ratchet,
    instagram: World,
) -> None:
    echo = fixture("instagram_echo")
    mid = echo["entry"][0]["messaging"][0]["message"]["mid"]
    message_id = _sent(ratchet, instagram, IGSID, mid)
    answer = ratchet.post(echo)
    assert answer.status_code == 200, answer.text
    assert answer.json()["inbound"] == 0 and windows(ratchet) == []
    assert _status(ratchet, message_id) == "sent"
    seen = fixture("instagram_seen")
    seen["entry"][0]["messaging"][0]["read"]["mid"] = mid
    answer = ratchet.post(seen)
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"]["applied"] == 1
    assert _status(ratchet, message_id) == "read"


def test_every_messenger_body_of_the_real_corpus_is_answered_2xx_and_kept(
    ratchet: Ratchet,
    page: World,
) -> None:
    corpus = Path(__file__).parents[1] / "fixtures" / "realpayloads.json"
    entries = [e for e in json.loads(corpus.read_text()) if e["provider"] == "messenger"]
    assert len(entries) >= 8
    for item in entries:
        body = copy.deepcopy(item["body"])
        for entry in body["entry"]:
            entry["id"] = PAGE
        raw = json.dumps(body).encode()
        answer = ratchet.post(raw)
        assert 200 <= answer.status_code < 300, (item["kind"], answer.text)
        with ratchet.db.transaction() as session:
            kept = session.scalars(
                select(WebhookDelivery.body).order_by(WebhookDelivery.id.desc()).limit(1)
            ).one()
        assert kept == raw.decode(), item["kind"]
