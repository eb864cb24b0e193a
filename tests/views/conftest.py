"""Fixtures of the view tests: the two tenants of `dashboard_world` (acme and other),
`one_user_per_request` for a module that uses several signed-in clients in one app context
(`pytestmark = pytest.mark.usefixtures("one_user_per_request")`), and for the Messenger
webhook tests `ratchet` (the app served over HTTP, `messenger_server.Ratchet`) with its
Messenger Page `page`."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from flask import Flask, g
from werkzeug.serving import make_server

from app.db import Database

from ..conftest import POLL, make_app
from ..factories import World, make_world
from .dashboard_world import Tenants, make_tenants
from .messenger_bodies import PAGE, SECRET
from .messenger_server import Ratchet


@pytest.fixture
def tenants(db: Database) -> Tenants:
    return make_tenants(db)


@pytest.fixture
def one_user_per_request(app: Flask) -> None:
    """Flask-Login keeps the signed-in user, and Flask-WTF the CSRF token, on `g`, which one
    app context shares between clients: each request forgets the last one's, so that each
    client is itself."""

    def forget() -> None:
        g.pop("_login_user", None)
        g.pop("csrf_token", None)

    app.before_request(forget)


@pytest.fixture
def ratchet(pg_url: str, redis_url: str, committed_db: Database) -> Iterator[Ratchet]:
    app: Flask = make_app(pg_url, redis_url)
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.db"] = committed_db
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    client = Ratchet(f"http://127.0.0.1:{server.port}", committed_db)
    with app.app_context():
        yield client
    client.http.close()
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    app.extensions["ratchet.redis"].close()


@pytest.fixture
def page(ratchet: Ratchet) -> World:
    return make_world(
        ratchet.db,
        provider="messenger",
        account_id=PAGE,
        app_secret=SECRET,
        verify_token="page-vt",
    )
