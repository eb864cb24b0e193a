"""A Twilio status callback below `sent` (`sending`, `queued`, `accepted`) proves Twilio
holds the message: for a message whose create answer was lost it is our `sent`, and the
retry after the unknown outcome does not call Twilio again (DESIGN section 1, promise 1;
section 7: "skipped if a webhook has answered meanwhile").

Real HTTP: a fake Twilio API served by werkzeug (the outside world), whose first create
call is accepted but answers after our deadline; the callback is signed with Twilio's own
validator at the exact StatusCallback URL the worker gave; the worker is `send_one`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from flask import Flask
from sqlalchemy import select
from twilio.request_validator import RequestValidator
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from app.clock import utcnow
from app.crypto import SecretBox
from app.db import Database
from app.models import Message
from app.repo.identities import create_identity
from app.repo.tenants import create_tenant
from jobs.send import send_one

from ..conftest import POLL, SECRET_KEY, T0, make_app
from ..factories import World, make_message

ACCOUNT = "AC" + "R" * 32
TOKEN = "twilio-auth-token-review-a"
SENDER = "whatsapp:+14155238886"


class FakeTwilio:
    """Twilio's Messages create call: every POST is accepted (a new sid); the first one
    answers only after `slow_first` seconds (our deadline has passed by then)."""

    def __init__(self, slow_first: float) -> None:
        self.slow_first = slow_first
        self.creates: list[dict[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, environ: Any, start_response: Any) -> Any:
        request = Request(environ)
        with self.lock:
            form = dict(request.form)
            self.creates.append(form)
            number = len(self.creates)
        sid = f"SM{number:032d}"
        if number == 1:
            time.sleep(self.slow_first)
        body = json.dumps({"sid": sid, "status": "queued", "account_sid": ACCOUNT})
        return Response(body, status=201, mimetype="application/json")(environ, start_response)


@pytest.fixture
def fake_twilio() -> Iterator[tuple[str, FakeTwilio]]:
    fake = FakeTwilio(slow_first=1.5)
    server = make_server("127.0.0.1", 0, fake, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", fake
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def fast_app(pg_url: str, redis_url: str) -> Iterator[Flask]:
    app = make_app(pg_url, redis_url, provider_timeout=0.5)
    with app.app_context():
        yield app
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()


def twilio_world(db: Database, base_url: str) -> World:
    with db.transaction() as session:
        tenant, key = create_tenant(session, "acme", T0)
        identity = create_identity(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=tenant.id,
            provider="twilio",
            account_id=ACCOUNT,
            base_url=base_url,
            token=TOKEN,
            sender=SENDER,
            now=T0,
        )
        return World(tenant.id, key, identity.id)


def callback(app: Flask, status_callback: str, fields: dict[str, str]) -> Any:
    """What Twilio does: POST the form to the StatusCallback URL it was given, signed."""
    signature = RequestValidator(TOKEN).compute_signature(status_callback, fields)
    parts = urlsplit(status_callback)
    with app.test_client() as client:
        return client.post(
            parts.path + "?" + parts.query,
            data=fields,
            headers={"X-Twilio-Signature": signature},
        )


@pytest.mark.parametrize("step", ["sending", "queued", "accepted"])
def test_a_twilio_callback_below_sent_stops_the_retry_of_an_unknown_outcome(
    fast_app: Flask, fake_twilio: tuple[str, FakeTwilio], step: str
) -> None:
    from ..conftest import truncate_all

    db: Database = fast_app.extensions["ratchet.db"]
    truncate_all(db)
    try:
        base_url, fake = fake_twilio
        world = twilio_world(db, base_url)
        message_id = make_message(db, world, recipient="16505551234")
        config = fast_app.config["RATCHET"]
        box = SecretBox(SECRET_KEY)
        start = utcnow()

        # 1. The first attempt: Twilio accepts it, but its answer comes after our deadline.
        outcome, _ = send_one(db, box, config, message_id, lambda: start)
        assert "retry" in outcome, outcome
        assert len(fake.creates) == 1
        sent_form = fake.creates[0]

        # 2. Within the webhook grace, Twilio calls back: it has the message (`sending`).
        fields = {
            "AccountSid": ACCOUNT,
            "ApiVersion": "2010-04-01",
            "From": SENDER,
            "To": "whatsapp:+16505551234",
            "MessageSid": f"SM{1:032d}",
            "SmsSid": f"SM{1:032d}",
            "MessageStatus": step,
            "SmsStatus": step,
        }
        answer = callback(fast_app, sent_form["StatusCallback"], fields)
        assert answer.status_code == 200, answer.get_json()
        with db.transaction() as session:
            row = session.scalars(select(Message).where(Message.id == message_id)).one()
            # The reconciler knows Twilio has it: the sid is adopted on the row, and the
            # step below `sent` is Twilio's acceptance, our `sent`, for a message whose
            # create answer was lost.
            assert row.provider_message_id == f"SM{1:032d}"
            assert row.status == "sent"

        # 3. The grace is over: the retry job runs. Twilio holds the message already.
        later = start + timedelta(seconds=config.webhook_grace + 5)
        outcome, _ = send_one(db, box, config, message_id, lambda: later)
        assert len(fake.creates) == 1, (
            f"Twilio was asked to create the message {len(fake.creates)} times "
            f"(second outcome: {outcome!r}) although its {step!r} callback, whose sid the "
            "reconciler adopted, had answered the unknown outcome: a double text"
        )
    finally:
        truncate_all(db)
