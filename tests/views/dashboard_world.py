"""Rows and sessions for the dashboard tests: two tenants, staff of each role, failed
messages made through the real repo functions, and a clock the dashboard reads."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.repo.acceptance import record_accepted
from app.repo.attempts import finish_attempt, start_attempt
from app.repo.claims import claim_message
from app.repo.failures import record_failed
from app.repo.staff import create_staff

from ..conftest import T0
from ..factories import World, make_message, make_world

LEASE = timedelta(seconds=25)
PASSWORD = "correct horse battery staple"
# What the dashboard's clock reads in these tests: ten minutes after the messages were made.
NOW = T0 + timedelta(minutes=10)
HTMX = {"HX-Request": "true"}  # the header htmx sends with its requests


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def use_clock(app: Flask, now: datetime = NOW) -> Clock:
    clock = Clock(now)
    app.extensions["ratchet.clock"] = clock
    return clock


@dataclass
class Tenants:
    acme: World
    other: World


def make_tenants(database: Database) -> Tenants:
    acme = make_world(database, name="acme", account_id="1000001")
    other = make_world(database, name="other", account_id="2000002", verify_token="verify-o")
    return Tenants(acme, other)


def make_staff(
    database: Database, email: str, role: str, tenant_id: int | None, password: str = PASSWORD
) -> str:
    with database.transaction() as session:
        create_staff(session, email, role, password, T0, tenant_id=tenant_id)
    return email


def client_for(
    app: Flask, db: Database, email: str, role: str, tenant_id: int | None
) -> FlaskClient:
    use_clock(app)
    make_staff(db, email, role, tenant_id)
    client = app.test_client()
    sign_in(client, email)
    return client


def csrf_token(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def sign_in(client: FlaskClient, email: str, password: str = PASSWORD) -> None:
    page = client.get("/sign-in").get_data(as_text=True)
    response = client.post(
        "/sign-in",
        data={"email": email, "password": password, "csrf_token": csrf_token(page)},
    )
    assert response.status_code == 302, response.get_data(as_text=True)


def page_token(client: FlaskClient, path: str = "/") -> str:
    return csrf_token(client.get(path).get_data(as_text=True))


def failed_message(
    database: Database,
    world: World,
    *,
    failure_class: str = "needs_human",
    error: dict[str, Any] | None = None,
    had_unknown: bool = False,
    recipient: str = "15551234567",
    minute: int = 0,
    key: str | None = None,
    accepted_id: str | None = None,
    campaign: str | None = None,
    template: dict[str, Any] | None = None,
) -> int:
    """A message whose one attempt ended in `failure_class` with `error` verbatim.

    With `accepted_id`, that attempt was answered with a provider id first (no `failed`
    status names it): the provider may hold a deliverable copy.
    """
    when = T0 + timedelta(minutes=minute)
    message_id = make_message(
        database,
        world,
        recipient=recipient,
        now=when,
        key=key,
        campaign=campaign,
        template=template,
    )
    error = error or {
        "provider": "whatsapp",
        "code": 132001,
        "title": "Template name does not exist",
    }
    with database.transaction() as session:
        claim = claim_message(session, message_id, when, LEASE)
        assert claim is not None
        start_attempt(session, claim, f"pk-{message_id}", when)
        finish_attempt(
            session,
            claim,
            when,
            "unknown" if had_unknown else failure_class,
            http_status=400,
            provider_message_id=accepted_id,
            error=error,
            response_body=json.dumps({"error": error}),
        )
        record_failed(
            session,
            claim,
            when,
            failure_class=failure_class,
            error=error,
            unknown_attempts=1 if had_unknown else 0,
            rate_limited_attempts=0,
            had_unknown=had_unknown,
        )
    return message_id


def sent_message(database: Database, world: World, wamid: str, *, minute: int = 0) -> int:
    """A message the provider accepted with `wamid`."""
    when = T0 + timedelta(minutes=minute)
    message_id = make_message(database, world, now=when)
    with database.transaction() as session:
        claim = claim_message(session, message_id, when, LEASE)
        assert claim is not None
        start_attempt(session, claim, f"pk-{message_id}", when)
        finish_attempt(session, claim, when, "accepted", provider_message_id=wamid)
        record_accepted(session, claim, wamid, when, unknown_attempts=0, had_unknown=False)
    return message_id
