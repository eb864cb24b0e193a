"""One event of a shape Meta documents but no status of ours (a checkbox plugin opt-in,
which has no `sender`: "The sender object is not included for messaging_optins events
triggered by the checkbox plugin", Messenger webhook reference) must not cost its
neighbours: the delivery receipt, or the echo answering an unknown outcome, batched beside
it is stored and applied (DESIGN section 1, promise 2; section 6)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import current_app

from app.models import WebhookStatus
from app.repo.acceptance import record_accepted
from app.repo.attempts import finish_attempt, start_attempt
from app.repo.claims import claim_message
from app.repo.failures import record_retry
from app.repo.messages import correlation_id_for
from jobs.sweep import sweep_once

from ..conftest import T0
from ..factories import World, make_message
from .messenger_bodies import PAGE, PSID, delivery, fixture, ms
from .messenger_server import Ratchet


def test_a_checkbox_opt_in_beside_a_delivery_receipt_does_not_lose_the_receipt(
    ratchet: Ratchet,
    page: World,
) -> None:
    message_id = ratchet.sent(page, PSID, T0, "m_one")
    body = delivery(mids=["m_one"], watermark=ms(T0) + 5000)
    # Meta batches events of one Page in one entry's `messaging`; this one came from the
    # checkbox plugin on the tenant's web site (documented shape: no `sender`).
    body["entry"][0]["messaging"].insert(
        0,
        {
            "recipient": {"id": PAGE},
            "timestamp": ms(T0) + 4000,
            "optin": {"ref": "checkout-page", "user_ref": "ref-7f3a"},
        },
    )
    answer = ratchet.post(body)
    assert answer.status_code < 300, answer.text

    # Nothing is left for the sweeper to replay: no status row was stored at all.
    stored = ratchet.count(WebhookStatus)
    assert ratchet.status(message_id) == "delivered", (
        f"the signed delivery was answered {answer.status_code} {answer.json()} and the "
        f"delivery receipt for m_one batched with a documented opt-in event never applied: "
        f"message {message_id} is still {ratchet.status(message_id)!r}, and {stored} status "
        "rows were stored for the sweeper to replay"
    )


@pytest.mark.xfail(
    strict=True,
    reason="known limit (docs/design.md section 10): a watermark that beats the send's answer "
    "moves nothing; the thread's next watermark or the echo does. Matching it to a message "
    "with no provider id yet could mark delivered a send that then fails.",
)
def test_a_delivery_watermark_that_beats_the_send_answer_is_not_lost(
    ratchet: Ratchet,
    page: World,
) -> None:
    """DESIGN section 6: "A status that arrives before the send response recorded the
    provider id is parked and applied when the id is recorded; the two must not miss each
    other." Messenger's delivery watermark routinely beats the Send API's answer."""
    message_id = make_message(ratchet.db, page, recipient=PSID)
    with ratchet.db.transaction() as session:  # the worker claims and calls Meta
        claim = claim_message(session, message_id, T0, timedelta(seconds=25))
        assert claim is not None
        start_attempt(session, claim, "key", T0)
    # Meta delivered it and says so before its answer to the Send API reached us.
    answer = ratchet.post(delivery(mids=None, watermark=ms(T0) + 300))
    assert answer.status_code == 200, answer.text
    with ratchet.db.transaction() as session:  # the answer: accepted as m_one
        finish_attempt(session, claim, T0, "accepted", provider_message_id="m_one")
        record_accepted(
            session,
            claim,
            "m_one",
            T0 + timedelta(milliseconds=600),
            unknown_attempts=0,
            had_unknown=False,
        )
    sweep_once(
        ratchet.db, current_app.config["RATCHET"], T0 + timedelta(seconds=5)
    )  # the sweeper's replay too
    assert ratchet.status(message_id) == "delivered", (
        f"Meta's delivery watermark covering message {message_id} arrived before the send "
        f"answer ({answer.json()}) and was neither parked nor applied: it stays "
        f"{ratchet.status(message_id)!r} until the thread's next watermark, if any"
    )


@pytest.mark.parametrize("opt_in", [False, True])  # False: the control, which passes
def test_an_echo_answering_an_unknown_outcome_beside_an_opt_in_still_stops_the_retry(
    ratchet: Ratchet,
    page: World,
    opt_in: bool,
) -> None:
    """The same loss, where it costs a double text: the echo (Meta's `sent`, carrying our
    correlation id back) is how a Send API call that timed out is matched before its
    retry (docs/design.md, Messenger and Instagram). Batched with a checkbox opt-in, it is
    never stored, and the retry after the grace sends a second copy."""
    message_id = make_message(ratchet.db, page, recipient=PSID)
    with ratchet.db.transaction() as session:
        claim = claim_message(session, message_id, T0, timedelta(seconds=25))
        assert claim is not None
        start_attempt(session, claim, "key", T0)
        assert record_retry(  # the call timed out: unknown, retry after the grace
            session,
            claim,
            T0 + timedelta(seconds=15),
            failure_class="unknown",
            error=None,
            unknown_attempts=1,
            rate_limited_attempts=0,
            had_unknown=True,
        )
        correlation = correlation_id_for(session, message_id, 1)
    body = fixture("echo")
    entry = body["entry"][0]
    entry["id"] = PAGE
    echo = entry["messaging"][0]
    echo["sender"]["id"], echo["recipient"]["id"] = PAGE, PSID
    echo["timestamp"] = ms(T0) + 400
    echo["message"]["metadata"] = correlation
    echo["message"]["mid"] = "m_echoed"
    if opt_in:
        entry["messaging"].append(
            {
                "recipient": {"id": PAGE},
                "timestamp": ms(T0) + 450,
                "optin": {"ref": "checkout-page", "user_ref": "ref-7f3a"},
            }
        )
    answer = ratchet.post(body)
    assert answer.status_code < 300, answer.text
    sweep_once(ratchet.db, current_app.config["RATCHET"], T0 + timedelta(seconds=5))
    with ratchet.db.transaction() as session:
        retry = claim_message(
            session, message_id, T0 + timedelta(seconds=16), timedelta(seconds=25)
        )
    assert retry is None, (
        f"the echo of the first copy came in a signed delivery ({answer.status_code} "
        f"{answer.json()}) yet the retry was claimed: a second copy goes to the customer"
    )
