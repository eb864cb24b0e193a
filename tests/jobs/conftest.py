"""Sending against the outside world: the sandbox as its own process, Ratchet served over
real HTTP (so the sandbox's signed webhooks reach it), PostgreSQL with real commits.

The clock the worker sees is passed in (`Env.clock`) and moved to each retry's time, so
retry times are read, never waited for.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from flask import Flask
from sqlalchemy import select, update
from werkzeug.serving import make_server

from app.clock import utcnow
from app.crypto import SecretBox
from app.db import Database
from app.models import Attempt, Identity, Message
from app.repo.identities import create_identity
from app.repo.tenants import create_tenant
from jobs.send import send_one
from jobs.tails import TAILS

from ..conftest import POLL, SECRET_KEY, make_app
from ..sandbox.conftest import SandboxProcess, start_sandbox_process, stop_sandbox_process

PROVIDER_TIMEOUT = 1.0
HANG_SECONDS = 2.0
_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    process = start_sandbox_process(tmp_path_factory.mktemp("jobs-sandbox") / "stderr.log")
    yield process
    code, output = stop_sandbox_process(process)
    assert code == 0, output


class Env:
    def __init__(self, app: Flask, db: Database, base_url: str, sandbox_url: str) -> None:
        self.app = app
        self.db = db
        self.base_url = base_url
        self.sandbox_url = sandbox_url
        self.config = app.config["RATCHET"]
        self.box = SecretBox(SECRET_KEY)
        self.now = utcnow()
        self.http = httpx.Client(timeout=10)

    def clock(self) -> datetime:
        return self.now

    # The outside world ----------------------------------------------------------------

    def sandbox(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, f"{self.sandbox_url}/_sandbox{path}", **kwargs)
        assert response.status_code < 300, response.text
        return response.json()

    def number(self, *, token: str = "good-token", **settings: Any) -> dict[str, Any]:
        """A sandbox number and the Ratchet identity that sends through it."""
        phone_number_id = f"5550{next(_numbers):08d}"
        number = {
            "phone_number_id": phone_number_id,
            "token": "good-token",
            "app_secret": "sandbox-app-secret",
            "webhook_url": f"{self.base_url}/webhooks/whatsapp",
            "hang_seconds": HANG_SECONDS,
            **settings,
        }
        self.sandbox("POST", "/numbers", json=number)
        with self.db.transaction() as session:
            tenant, key = create_tenant(session, f"tenant-{phone_number_id}", self.now)
            identity = create_identity(
                session,
                self.box,
                tenant_id=tenant.id,
                provider="whatsapp",
                account_id=phone_number_id,
                base_url=f"{self.sandbox_url}/v21.0",
                token=token,
                app_secret="sandbox-app-secret",
                now=self.now,
            )
        return {"phone_number_id": phone_number_id, "identity_id": identity.id, "api_key": key}

    def set_rates(self, number: dict[str, Any], **rates: float) -> None:
        """Set the identity's pacing rates (`campaign_rate=500.0, total_rate=500.0`)."""
        with self.db.transaction() as session:
            session.execute(
                update(Identity).where(Identity.id == number["identity_id"]).values(**rates)
            )

    def twilio_account(self, *, token: str = "twilio-auth-token", **settings: Any) -> Any:
        """A sandbox Twilio account with one sender, and the Ratchet identity that sends
        from it. Its sid stands in the number's place for the sandbox's webhook log."""
        account_sid = f"AC{next(_numbers):032x}"
        sender = "whatsapp:+15550100001"
        self.sandbox(
            "POST",
            "/twilio/accounts",
            json={
                "account_sid": account_sid,
                "auth_token": "twilio-auth-token",
                "senders": [sender],
                "hang_seconds": HANG_SECONDS,
                **settings,
            },
        )
        with self.db.transaction() as session:
            tenant, key = create_tenant(session, f"tenant-{account_sid}", self.now)
            identity = create_identity(
                session,
                self.box,
                tenant_id=tenant.id,
                provider="twilio",
                account_id=account_sid,
                base_url=self.sandbox_url,
                token=token,
                sender=sender,
                now=self.now,
            )
        return {
            "phone_number_id": account_sid,
            "identity_id": identity.id,
            "api_key": key,
            "provider": "twilio",
        }

    def accepted(self, number: dict[str, Any]) -> list[dict[str, Any]]:
        if number.get("provider") == "twilio":
            path = f"/twilio/accounts/{number['phone_number_id']}/messages"
            return self.sandbox("GET", path)["messages"]
        return self.sandbox("GET", f"/numbers/{number['phone_number_id']}/messages")["messages"]

    def requests(self, number: dict[str, Any]) -> list[dict[str, Any]]:
        if number.get("provider") == "twilio":
            path = f"/twilio/requests?account_sid={number['phone_number_id']}"
            return self.sandbox("GET", path)["requests"]
        path = f"/requests?phone_number_id={number['phone_number_id']}"
        return self.sandbox("GET", path)["requests"]

    def settle(self, number: dict[str, Any], quiet: float = 0.6, limit: float = 15.0) -> None:
        """Wait until the sandbox has posted no webhook for `quiet` seconds."""
        path = f"/webhooks?phone_number_id={number['phone_number_id']}"
        deadline = time.monotonic() + limit
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            count = len(self.sandbox("GET", path)["webhooks"])
            if count != last:
                last, since = count, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.05)

    # Ratchet --------------------------------------------------------------------------

    def send(self, number: dict[str, Any], to: str, **body: Any) -> int:
        payload = {"identity_id": number["identity_id"], "to": to, **body}
        if "text" not in payload and "template" not in payload:
            payload["text"] = "hello"
        response = self.http.post(
            f"{self.base_url}/v1/messages",
            json=payload,
            headers={"Authorization": f"Bearer {number['api_key']}"},
        )
        assert response.status_code == 201, response.text
        return int(response.json()["id"])

    def attempt(self, message_id: int) -> str:
        outcome, _ = send_one(self.db, self.box, self.config, message_id, self.clock)
        return outcome

    def attempt_outcomes(self, message_id: int) -> list[str | None]:
        """The outcomes of a message's attempts, first first (None: no outcome yet)."""
        with self.db.transaction() as session:
            query = select(Attempt.outcome).where(Attempt.message_id == message_id)
            return list(session.scalars(query.order_by(Attempt.number)))

    def message(self, message_id: int) -> Message:
        with self.db.transaction() as session:
            row = session.get(Message, message_id, populate_existing=True)
            assert row is not None
            return row

    def drive(self, number: dict[str, Any], message_id: int, limit: int = 12) -> list[str]:
        """Attempt, let the webhooks land, move the clock to the next attempt; repeat."""
        outcomes = []
        for _ in range(limit):
            outcomes.append(self.attempt(message_id))
            self.settle(number)
            row = self.message(message_id)
            if row.status != "sending" or row.next_attempt_at is None:
                break
            self.now = max(self.now, row.next_attempt_at) + timedelta(milliseconds=1)
        return outcomes

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def env(
    pg_url: str, redis_url: str, committed_db: Database, sandbox: SandboxProcess
) -> Iterator[Env]:
    # One shard per lane: these tests are about one drain; tests/jobs/test_shards.py
    # turns shards on where they are the subject.
    app = make_app(pg_url, redis_url, provider_timeout=PROVIDER_TIMEOUT, shard_max=1)
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.db"] = committed_db
    server = make_server("127.0.0.1", 0, app, threaded=True)
    # Providers told where to call back (Twilio's StatusCallback) are told this server.
    app.config["RATCHET"] = replace(
        app.config["RATCHET"], public_base_url=f"http://127.0.0.1:{server.port}"
    )
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    environment = Env(app, committed_db, f"http://127.0.0.1:{server.port}", sandbox.url)
    environment.sandbox("POST", "/reset")
    with app.app_context():
        yield environment
    TAILS.wait()  # a drain's tail (`jobs/tails.py`) writes nothing into the next test
    environment.sandbox("POST", "/reset")
    environment.close()
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    app.extensions["ratchet.redis"].close()
