"""A Twilio dead letter in real Chromium: a signed `undelivered` callback (Twilio's
documented body) posted over HTTP fails the message, and the dead-letters page shows
Twilio's code verbatim with what it means and what to do."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
from playwright.sync_api import Page, expect
from twilio.request_validator import RequestValidator

from app.models import Message
from app.repo.acceptance import record_accepted
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message

from ..factories import make_message, make_world
from ..views.dashboard_world import T0, make_staff
from ..views.twilio_world import FIXTURES, SID, TOKEN
from .conftest import Served, screenshot
from .dashboard_steps import follow, sign_in

pytestmark = pytest.mark.slow


def test_an_undelivered_twilio_message_reads_as_a_dead_letter_with_what_to_do(
    page: Page, served: Served
) -> None:
    world = make_world(served.db, provider="twilio", account_id=SID, token=TOKEN)
    make_staff(served.db, "ops@acme.test", "operator", world.tenant_id)
    message_id = make_message(served.db, world, recipient="16505551234")
    with served.db.transaction() as session:
        claim = claim_message(session, message_id, T0, timedelta(seconds=25))
        assert claim is not None
        start_attempt(session, claim, "pk-1", T0)
        record_accepted(session, claim, "SM" + "X" * 32, T0, unknown_attempts=0, had_unknown=False)
    fields = json.loads((FIXTURES / "status_undelivered.json").read_text())
    # Twilio signs the public URL it was given (PUBLIC_BASE_URL), whatever serves it.
    public = f"http://127.0.0.1:8000/webhooks/twilio/{world.identity_id}"
    signature = RequestValidator(TOKEN).compute_signature(public, fields)
    answer = httpx.post(
        f"{served.url}/webhooks/twilio/{world.identity_id}",
        data=fields,
        headers={"X-Twilio-Signature": signature},
    )
    assert answer.status_code == 200, answer.text
    # The callback was stamped by the real clock when it arrived; the page reads a minute on
    # from that stamp (not from now: on a busy machine seconds pass before this line).
    with served.db.transaction() as session:
        failed = session.get(Message, message_id)
        assert failed is not None and failed.failed_at is not None
        served.clock.now = failed.failed_at + timedelta(minutes=1)

    sign_in(page, served, "ops@acme.test")
    follow(page, page.get_by_role("link", name="Dead letters"))
    row = page.locator(f"#dead-letter-{message_id}")
    expect(row).to_contain_text("63016")
    expect(row).to_contain_text("Outside the 24-hour window: free-form text is not allowed.")
    expect(row).to_contain_text("Send an approved template instead, or wait for the user to write.")
    expect(row).to_contain_text("1 m ago")
    row.get_by_text("Details, trace id, HTTP").click()
    expect(row).to_contain_text("undelivered")  # Twilio's callback, verbatim
    screenshot(page, "twilio-01-dead-letters")
    follow(page, row.get_by_role("link", name=f"#{message_id}"))
    expect(page.locator("#status-widget")).to_contain_text("failed")
    screenshot(page, "twilio-02-message-failed")
