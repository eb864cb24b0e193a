"""The client's address behind reverse proxies: with RATCHET_TRUSTED_PROXIES set, the
throttle and the audit log see the address the proxy forwarded (so one guesser behind the
proxy does not lock every staff member out); without it, a forwarded address is ignored
(so a guesser cannot dodge the throttle by inventing one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask, g
from sqlalchemy import select

from app.config import Config, ConfigError
from app.db import Database
from app.models import AuditEntry

from ..conftest import make_app
from .dashboard_world import PASSWORD, csrf_token, make_staff, make_tenants, use_clock

PROXY = "10.0.0.2"


def attempt(app: Flask, email: str, password: str, forwarded_for: str) -> int:
    g.pop("csrf_token", None)
    g.pop("_login_user", None)
    client = app.test_client()
    environ = {"REMOTE_ADDR": PROXY}
    headers = {
        "X-Forwarded-For": forwarded_for,
        "X-Forwarded-Proto": "https",
        # Over https Flask-WTF also wants a same-site Referer (a browser sends one).
        "Referer": "https://localhost/sign-in",
    }
    page = client.get("/sign-in", environ_base=environ, headers=headers)
    response = client.post(
        "/sign-in",
        data={"email": email, "password": password, "csrf_token": csrf_token(page.text)},
        environ_base=environ,
        headers=headers,
    )
    return response.status_code


@pytest.fixture
def proxied(pg_url: str, redis_url: str) -> Iterator[Flask]:
    app = make_app(pg_url, redis_url, trusted_proxies=1)
    with app.app_context():
        yield app
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()


@pytest.fixture
def proxied_db(proxied: Flask) -> Iterator[Database]:
    database: Database = proxied.extensions["ratchet.db"]
    connection = database.engine.connect()
    outer = connection.begin()
    database.bind_to(connection)
    yield database
    outer.rollback()
    connection.close()


def test_behind_one_trusted_proxy_a_guesser_locks_out_only_its_own_forwarded_address(
    proxied: Flask, proxied_db: Database
) -> None:
    use_clock(proxied)
    tenants = make_tenants(proxied_db)
    make_staff(proxied_db, "ana@acme.test", "operator", tenants.acme.tenant_id)
    for n in range(20):
        assert attempt(proxied, f"guess{n}@acme.test", "guess", "203.0.113.5") == 401
    assert attempt(proxied, "ana@acme.test", PASSWORD, "203.0.113.5") == 429
    # Ana reaches the same proxy from her own address: she signs in.
    assert attempt(proxied, "ana@acme.test", PASSWORD, "198.51.100.7") == 302
    with proxied_db.transaction() as session:
        signed_in = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "staff.sign_in")
        ).one()
    assert signed_in.detail is not None and signed_in.detail["address"] == "198.51.100.7"


def test_only_the_address_the_trusted_proxy_saw_counts_not_one_the_client_made_up(
    proxied: Flask, proxied_db: Database
) -> None:
    use_clock(proxied)
    make_tenants(proxied_db)
    for n in range(20):
        # The client prepends a fresh made-up address each time; the proxy appends the real one.
        assert attempt(proxied, f"g{n}@acme.test", "guess", f"192.0.2.{n}, 203.0.113.5") == 401
    assert attempt(proxied, "g@acme.test", "guess", "192.0.2.99, 203.0.113.5") == 429


def test_without_trusted_proxies_a_forwarded_address_is_ignored(app: Flask, db: Database) -> None:
    use_clock(app)
    make_tenants(db)
    for n in range(20):
        assert attempt(app, f"guess{n}@acme.test", "guess", f"192.0.2.{n}") == 401
    # Every attempt came from the proxy's socket address, whatever the header said.
    assert attempt(app, "other@acme.test", "guess", "192.0.2.200") == 429


def test_a_bad_number_of_trusted_proxies_is_refused_at_start() -> None:
    environ = {"SECRET_KEY": "x" * 20, "RATCHET_TRUSTED_PROXIES": "-1"}
    with pytest.raises(ConfigError, match="RATCHET_TRUSTED_PROXIES"):
        Config.from_env(environ)
    assert Config.from_env({"SECRET_KEY": "x" * 20}).trusted_proxies == 0
