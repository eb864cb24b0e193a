"""The WhatsApp webhook tests' number (its app secret and verify token set), a client of
the app, and the check that a refused delivery applied nothing."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from app.db import Database
from app.models import WebhookDelivery, WebhookStatus

from ..factories import World, make_world, message
from ..meta import PHONE_NUMBER_ID
from ..whatsapp_world import SECRET

__all__ = ["client", "world"]


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET, verify_token="vt-1")


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def assert_nothing_applied(db: Database, message_id: int) -> None:
    assert message(db, message_id).status == "sent"
    with db.transaction() as session:
        assert session.scalars(select(WebhookStatus)).all() == []
        assert session.scalars(select(WebhookDelivery)).all() == []
