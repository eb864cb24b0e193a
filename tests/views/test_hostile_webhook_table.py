"""A hostile-webhook table (`hostile_webhooks.py`), over real HTTP to a served Ratchet, at
every webhook endpoint (WhatsApp, Messenger and Instagram, Twilio): truncated bodies, a 10 MB
body, a wrong type at each level of the envelope, deep nesting, invalid UTF-8, and the
signature forged every way a sender can get it wrong. Each row gets its exact answer, whose
words name the problem, and stores nothing it should not (the webhook tables counted around
each row). After the whole table the process is healthy: the health routes answer, and a
valid signed delivery at each endpoint still moves its message to `delivered`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta

import httpx
import pytest
from flask import Flask
from sqlalchemy import func, select
from werkzeug.serving import make_server

from app.db import Database
from app.models import ConversationWindow, MessageEvent
from app.models_meta import ProviderEvent
from app.models_webhooks import WebhookDelivery, WebhookStatus

from ..conftest import POLL, T0, make_app
from ..factories import World, make_world
from ..meta import PHONE_NUMBER_ID, encode
from ..whatsapp_world import sent_message as whatsapp_sent_message
from .hostile_webhooks import (
    MS,
    SECRET,
    WA,
    Row,
    messenger_body,
    meta_signature_rows,
    shape_rows,
    twilio_rows,
    valid_rows,
    whatsapp_body,
)
from .messenger_bodies import IG, PAGE, PSID
from .messenger_server import Ratchet
from .twilio_world import PUBLIC, make_twilio_world
from .twilio_world import sent_message as twilio_sent_message

# What a row may store, in the order `Row.stored` counts it.
COUNTED = (WebhookDelivery, WebhookStatus, MessageEvent, ConversationWindow, ProviderEvent)


@dataclass
class Served:
    db: Database
    http: httpx.Client
    whatsapp: World
    messenger: World
    twilio: World

    def count(self) -> tuple[int, ...]:
        with self.db.transaction() as session:
            return tuple(
                int(session.scalar(select(func.count()).select_from(model)) or 0)
                for model in COUNTED
            )

    def send(self, row: Row) -> httpx.Response:
        return self.http.post(row.path, content=row.raw, headers=row.headers)


@pytest.fixture
def served(pg_url: str, redis_url: str, committed_db: Database) -> Iterator[Served]:
    app: Flask = make_app(pg_url, redis_url)
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.db"] = committed_db
    # Twilio signs the public URL it was given: the test apps' own (the default).
    app.config["RATCHET"] = replace(app.config["RATCHET"], public_base_url=PUBLIC)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    http = httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=60)
    db = committed_db
    # The Instagram account beside the Page, so that its deliveries verify too.
    make_world(db, name="ig", provider="instagram", account_id=IG, app_secret=SECRET)
    with app.app_context():
        yield Served(
            db,
            http,
            make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET),
            make_world(db, name="page", provider="messenger", account_id=PAGE, app_secret=SECRET),
            make_twilio_world(db, name="twilio"),
        )
    http.close()
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    app.extensions["ratchet.redis"].close()


def error_of(answer: httpx.Response) -> str:
    if answer.headers.get("content-type", "").startswith("application/json"):
        return str(answer.json().get("error", ""))
    return answer.text


def test_every_hostile_row_gets_its_clear_answer_and_the_process_stays_healthy(
    served: Served,
) -> None:
    db = served.db
    ratchet = Ratchet(str(served.http.base_url).rstrip("/"), db)
    messages = {
        "whatsapp": whatsapp_sent_message(db, served.whatsapp, "wamid.TABLE"),
        "messenger": ratchet.sent(served.messenger, PSID, T0 + timedelta(seconds=1), "m_TABLE"),
        "twilio": twilio_sent_message(db, served.twilio),
    }
    # A valid `sent` first: this process then remembers the number and the Page, and the
    # forged signatures below meet that memory (the fast path), not only the lookup.
    for row in valid_rows(served.twilio.identity_id, "sent"):
        assert served.send(row).status_code == 200, row.name
    rows = (
        shape_rows()
        + meta_signature_rows(WA, encode(whatsapp_body()), "whatsapp")
        + meta_signature_rows(MS, encode(messenger_body()), "messenger")
        + twilio_rows(served.twilio.identity_id)
    )
    wrong = []
    for row in rows:
        before = served.count()
        answer = served.send(row)
        stored = tuple(b - a for a, b in zip(before, served.count(), strict=True))
        error = error_of(answer)
        # Said once: what is wrong follows the provider's name, never the name twice.
        said = row.words in error and error.count(" webhook: ") <= 1
        if answer.status_code != row.status or not said or stored != row.stored:
            wrong.append(f"{row.name}: {answer.status_code} {error[:160]!r} stored {stored}")
    print(f"hostile webhook table: {len(rows)} rows")
    assert not wrong, "\n".join(wrong)
    assert {name: ratchet.status(id_) for name, id_ in messages.items()} == dict.fromkeys(
        messages, "sent"
    )

    assert served.http.get("/healthz").status_code == 200
    assert served.http.get("/readyz").status_code == 200
    for row in valid_rows(served.twilio.identity_id):
        answer = served.send(row)
        assert answer.status_code == 200, (row.name, answer.text)
    assert {name: ratchet.status(id_) for name, id_ in messages.items()} == dict.fromkeys(
        messages, "delivered"
    )
