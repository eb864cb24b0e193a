"""The sign-in throttle: counted before the password is checked (parallel guesses over real
HTTP get at most the limit's checks), a delay that grows per account and address pair, a
lock per address only (a stranger cannot lock a named person out), and what an anonymous
visitor types kept bounded (no 500 for a NUL or a long email)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from flask import Flask, g
from flask.testing import FlaskClient
from sqlalchemy import func, select
from werkzeug.serving import make_server

from app.db import Database
from app.models import AuditEntry

from ..conftest import POLL
from .dashboard_world import PASSWORD, Clock, csrf_token, make_staff, make_tenants, use_clock

GUESSES = 16
FREE = 5


def attempt(
    client: FlaskClient, email: str, password: str, address: str = "198.51.100.7"
) -> tuple[int, str]:
    # The tests share one app context: forget the CSRF token another client's request
    # cached in `g`, as a new request in production would.
    g.pop("csrf_token", None)
    g.pop("_login_user", None)
    environ = {"REMOTE_ADDR": address}
    token = csrf_token(client.get("/sign-in", environ_base=environ).get_data(as_text=True))
    response = client.post(
        "/sign-in",
        data={"email": email, "password": password, "csrf_token": token},
        environ_base=environ,
    )
    return response.status_code, response.get_data(as_text=True)


def audit_count(database: Database, action: str) -> int:
    with database.transaction() as session:
        query = select(func.count()).where(AuditEntry.action == action)
        return session.scalar(query.select_from(AuditEntry)) or 0


@pytest.fixture
def base_url(app: Flask, committed_db: Database) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.port}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.mark.slow
def test_sixteen_parallel_guesses_over_http_get_at_most_the_limits_password_checks(
    app: Flask, base_url: str, committed_db: Database
) -> None:
    use_clock(app)
    tenants = make_tenants(committed_db)
    make_staff(committed_db, "ana@acme.test", "admin", tenants.acme.tenant_id)
    barrier = threading.Barrier(GUESSES)

    def guess(n: int) -> int:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            token = csrf_token(client.get("/sign-in").text)
            barrier.wait(timeout=30)
            form = {"email": "ana@acme.test", "password": f"guess {n}", "csrf_token": token}
            return client.post("/sign-in", data=form).status_code

    with ThreadPoolExecutor(max_workers=GUESSES) as pool:
        statuses = list(pool.map(guess, range(GUESSES)))
    checked = statuses.count(401)
    assert checked == FREE, statuses
    assert statuses.count(429) == GUESSES - FREE
    # The audit log agrees: one failed sign-in per password actually checked.
    assert audit_count(committed_db, "staff.sign_in_failed") == FREE


def test_the_pair_delay_doubles_with_each_failure_past_the_free_ones(
    app: Flask, db: Database
) -> None:
    clock: Clock = use_clock(app)
    tenants = make_tenants(db)
    make_staff(db, "ana@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    for _ in range(FREE):
        assert attempt(client, "ana@acme.test", "guess")[0] == 401
    for seconds in (30, 60, 120, 240):
        status, body = attempt(client, "ana@acme.test", "guess")
        assert status == 429, body
        clock.now += timedelta(seconds=seconds - 1)
        assert attempt(client, "ana@acme.test", "guess")[0] == 429
        clock.now += timedelta(seconds=1)
        assert attempt(client, "ana@acme.test", "guess")[0] == 401
    # A right password clears the run.
    clock.now += timedelta(minutes=8)
    assert attempt(client, "ana@acme.test", PASSWORD)[0] == 302


def test_a_stranger_guessing_from_elsewhere_cannot_lock_a_named_person_out(
    app: Flask, db: Database
) -> None:
    use_clock(app)
    tenants = make_tenants(db)
    make_staff(db, "ana@acme.test", "operator", tenants.acme.tenant_id)
    stranger = app.test_client()
    for _ in range(12):
        attempt(stranger, "ana@acme.test", "guess", address="203.0.113.66")
    assert attempt(stranger, "ana@acme.test", "guess", address="203.0.113.66")[0] == 429
    ana = app.test_client()
    assert attempt(ana, "ana@acme.test", PASSWORD, address="198.51.100.7")[0] == 302


def test_an_address_past_twenty_failures_waits_for_the_windows_end_for_every_email(
    app: Flask, db: Database
) -> None:
    clock: Clock = use_clock(app)
    tenants = make_tenants(db)
    make_staff(db, "ana@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    for n in range(20):
        assert attempt(client, f"guess{n}@acme.test", "guess")[0] == 401
    status, body = attempt(client, "ana@acme.test", PASSWORD)
    assert status == 429 and "try again in 15 min" in body
    # Another address is not held up.
    assert attempt(app.test_client(), "ana@acme.test", PASSWORD, address="192.0.2.1")[0] == 302
    clock.now += timedelta(minutes=15)
    assert attempt(client, "ana@acme.test", PASSWORD)[0] == 302


@pytest.mark.parametrize("email", ["a" * 240 + "@acme.test", "ana@acme.test\x07"])
def test_a_long_or_odd_email_is_a_plain_refusal_with_a_bounded_audit_row(
    app: Flask, db: Database, email: str
) -> None:
    use_clock(app)
    tenants = make_tenants(db)
    make_staff(db, "ana@acme.test", "operator", tenants.acme.tenant_id)
    status, body = attempt(app.test_client(), email, PASSWORD)
    assert status == 401
    assert "do not match a staff login" in body
    with db.transaction() as session:
        (row,) = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "staff.sign_in_failed")
        )
    assert len(row.actor) <= 100 and len(row.target) <= 100
    assert row.actor.isprintable() and row.target.isprintable()


@pytest.mark.parametrize("email", ["ana\x00@acme.test", "\x00"])
def test_a_nul_in_the_email_is_refused_before_sign_in_and_leaves_no_row(
    app: Flask, db: Database, email: str
) -> None:
    use_clock(app)
    make_tenants(db)
    status, body = attempt(app.test_client(), email, PASSWORD)
    assert status == 400 and "NUL" in body
    assert audit_count(db, "staff.sign_in_failed") == 0
